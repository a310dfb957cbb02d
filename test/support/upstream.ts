// Peers built the way upstream ones are, independently of our codec: grpc-js
// with @grpc/proto-loader reading proto/*.proto (int64 as decimal strings).
// They stand in for Go agents and servers, which this machine cannot run.

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Harness } from './harness.js';
import { startTCPServer } from './tunnel.js';

/** The repository root (the directory holding our package.json), found from this file. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'yurt-tunnel') return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error('repository root not found');
    dir = up;
  }
}

export const PROTO_DIR = join(repoRoot(), 'proto');

/** A packet as proto-loader objects look (longs: String, enums: String, oneofs: true). */
export interface UpstreamPacket {
  type: string;
  payload?: string;
  dialRequest?: { protocol: string; address: string; random: string };
  dialResponse?: { error: string; connectID: string; random: string };
  data?: { connectID: string; error: string; data: Buffer };
  closeRequest?: { connectID: string };
  closeResponse?: { error: string; connectID: string };
  closeDial?: { random: string };
  drain?: Record<string, never>;
}

let loaded: grpc.GrpcObject | undefined;

export function konnectivityProtos(): grpc.GrpcObject {
  loaded ??= grpc.loadPackageDefinition(
    protoLoader.loadSync(['client.proto', 'agent.proto'], {
      includeDirs: [PROTO_DIR],
      longs: String,
      enums: String,
      defaults: true,
      oneofs: true,
    }),
  );
  return loaded;
}

export interface ScriptedAgent {
  call: grpc.ClientDuplexStream<UpstreamPacket, UpstreamPacket>;
  headers: Promise<grpc.Metadata>;
  status: Promise<grpc.StatusObject>;
  /** Resolves with the next packet from the server. */
  next(): Promise<UpstreamPacket>;
  close(): void;
}

/** An agent that does only what the test tells it, over a real mutual-TLS gRPC connection. */
export function scriptedAgent(
  h: Harness,
  address: string,
  opts: { metadata: Array<[string, string]>; tls: { ca: string; cert: string; key: string } },
): ScriptedAgent {
  const AgentService = konnectivityProtos().AgentService as grpc.ServiceClientConstructor;
  const creds = grpc.credentials.createSsl(Buffer.from(opts.tls.ca), Buffer.from(opts.tls.key), Buffer.from(opts.tls.cert));
  const client = new AgentService(address, creds, { 'grpc.ssl_target_name_override': 'localhost', 'grpc.use_local_subchannel_pool': 1 });
  const md = new grpc.Metadata();
  for (const [k, v] of opts.metadata) md.add(k, v);
  const call = (client as unknown as { Connect(md: grpc.Metadata): ScriptedAgent['call'] }).Connect(md);
  const queue: UpstreamPacket[] = [];
  const waiters: Array<(p: UpstreamPacket) => void> = [];
  call.on('data', (p: UpstreamPacket) => {
    const w = waiters.shift();
    if (w !== undefined) w(p);
    else queue.push(p);
  });
  call.on('error', () => {});
  const headers = new Promise<grpc.Metadata>((resolve) => call.once('metadata', resolve));
  const status = new Promise<grpc.StatusObject>((resolve) => call.once('status', resolve));
  const close = (): void => {
    call.cancel();
    client.close();
  };
  h.defer(close);
  return {
    call,
    headers,
    status,
    next: () => new Promise((resolve) => (queue.length > 0 ? resolve(queue.shift()!) : waiters.push(resolve))),
    close,
  };
}

export type ScriptedCall = grpc.ServerDuplexStream<UpstreamPacket, UpstreamPacket>;

export interface ScriptedServer {
  port: number;
  /** Calls received, newest last. */
  calls: ScriptedCall[];
  /** Resolves with the first call not yet handed out. */
  nextCall(): Promise<ScriptedCall>;
  stop(): Promise<void>;
}

/** A grpc-js AgentService server (as an upstream server would be) that sends serverid/servercount headers. */
export async function scriptedServer(
  h: Harness,
  opts: { serverID: string; serverCount: number; tls: { ca: string; cert: string; key: string } },
): Promise<ScriptedServer> {
  const server = new grpc.Server();
  const calls: ScriptedCall[] = [];
  let handedOut = 0;
  const waiting: Array<(call: ScriptedCall) => void> = [];
  const AgentService = konnectivityProtos().AgentService as grpc.ServiceClientConstructor;
  server.addService(AgentService.service, {
    Connect: (call: ScriptedCall) => {
      const md = new grpc.Metadata();
      md.set('serverid', opts.serverID);
      md.set('servercount', String(opts.serverCount));
      call.sendMetadata(md);
      call.on('error', () => {});
      calls.push(call);
      const w = waiting.shift();
      if (w !== undefined) {
        handedOut++;
        w(call);
      }
    },
  });
  const creds = grpc.ServerCredentials.createSsl(
    Buffer.from(opts.tls.ca),
    [{ cert_chain: Buffer.from(opts.tls.cert), private_key: Buffer.from(opts.tls.key) }],
    true,
  );
  // We accept the TCP connections and hand them to grpc-js, so that stop can
  // close each one. forceShutdown() alone closes a session gracefully first and
  // then waits for the peer's EOF; when the HTTP/2 session had already read it,
  // the socket stayed open for good (1 run in ~20 of flow-control.test.ts).
  const injector = server.createConnectionInjector(creds);
  const tcp = await startTCPServer(h, (socket) => injector.injectConnection(socket));
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    for (const c of calls) c.destroy();
    server.forceShutdown();
    injector.destroy();
    for (const socket of tcp.sockets) socket.destroy();
    await new Promise((resolve) => tcp.server.close(resolve));
  };
  h.defer(stop);
  const nextCall = (): Promise<ScriptedCall> =>
    handedOut < calls.length ? Promise.resolve(calls[handedOut++]!) : new Promise((resolve) => waiting.push(resolve));
  return { port: tcp.port, calls, nextCall, stop };
}
