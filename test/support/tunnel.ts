// Real tunnel parts for tests: a server (tunnel core, agent endpoint over
// mutual TLS, CONNECT proxier on a Unix socket in a temp dir), in-process
// agents, a CONNECT client, and TCP targets. Everything registers its own
// cleanup with the test's harness.

import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { ClientSet } from '../../pkg/agent/client-set.js';
import { Dialer } from '../../pkg/agent/dialer.js';
import type { ServerConnectionOptions } from '../../pkg/agent/server-connection-options.js';
import { HttpConnectServer } from '../../pkg/frontend/http-connect.js';
import type { Logger } from '../../pkg/log/logger.js';
import { MemoryLogger } from './memory-logger.js';
import { AgentEndpoint } from '../../pkg/endpoint/agent-endpoint.js';
import type { AgentEndpointOptions } from '../../pkg/endpoint/agent-endpoint-settings.js';
import type { TunnelOptions } from '../../pkg/tunnel/options.js';
import { Tunnel } from '../../pkg/tunnel/tunnel.js';
import { startBlipRelay } from './blip-relay.js';
import type { Harness } from './harness.js';
import { testPKI } from './pki.js';

export async function tempDir(h: Harness, prefix = 'yt-test-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  h.defer(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Polls `cond` every 10 ms until true; fails after `timeoutMs`. The default is for a machine at load 15 on 2 cores (CI
 * with two test files beside a real cluster): there an agent's TLS handshake, its reconnect or a server's first answer
 * took several seconds where they take a fraction of one on an idle machine, so 5 s failed now and then. A wait ends as
 * soon as `cond` holds: a long limit costs nothing when things go right.
 */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

/**
 * Waits until `value()` has stopped changing for `quietMs` (a pipeline whose
 * buffers have filled); fails after `timeoutMs`. Returns the settled value.
 */
export async function waitForSteady(what: string, value: () => number, quietMs = 300, timeoutMs = 10_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let last = value();
  let since = Date.now();
  for (;;) {
    await sleep(20);
    const now = value();
    if (now !== last) {
      last = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) {
      return now;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} to settle (still at ${now})`);
  }
}

export interface TestServer {
  tunnel: Tunnel;
  endpoint: AgentEndpoint;
  proxier: HttpConnectServer;
  /** host:port of the agent endpoint. */
  agentAddress: string;
  udsPath: string;
  log: MemoryLogger;
  stop(): Promise<void>;
}

export interface TestServerOptions {
  tunnel?: TunnelOptions;
  endpoint?: Partial<AgentEndpointOptions>;
  /** Reuse a port (server restart tests). */
  port?: number;
  udsPath?: string;
  serverID?: string;
}

export async function startServer(h: Harness, opts: TestServerOptions = {}): Promise<TestServer> {
  const pki = testPKI();
  const log = new MemoryLogger(3);
  const tunnel = new Tunnel({ logger: log, ...opts.tunnel });
  const endpoint = new AgentEndpoint(tunnel, {
    host: '127.0.0.1',
    port: opts.port ?? 0,
    tls: { cert: pki.server.cert, key: pki.server.key, ca: pki.ca.cert },
    serverID: opts.serverID ?? 'test-server',
    logger: log,
    ...opts.endpoint,
  });
  const udsPath = opts.udsPath ?? join(await tempDir(h), 'proxier.sock');
  const proxier = new HttpConnectServer(tunnel, { path: udsPath, logger: log });
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    (stopped ??= (async () => {
      await proxier.close();
      await tunnel.close();
      await endpoint.close(200);
    })());
  h.defer(stop);
  await endpoint.start();
  await proxier.start();
  return { tunnel, endpoint, proxier, agentAddress: `127.0.0.1:${endpoint.address.port}`, udsPath, log, stop };
}

export interface TestAgent {
  clients: ClientSet;
  log: MemoryLogger;
  stop(): Promise<void>;
}

export interface TestAgentOptions {
  nodeName: string;
  identifiers?: string;
  allowList?: AllowList;
  dialTimeoutMs?: number;
  /** Default: testPKI().agent(nodeName, identifiers). */
  tls?: ServerConnectionOptions['tls'];
  connection?: Partial<ServerConnectionOptions>;
  syncIntervalMs?: number;
  /** See ClientSetOptions.probeIntervalMs; default never in tests. */
  probeIntervalMs?: number;
  logger?: Logger;
}

/** Starts an in-process agent (the same ClientSet the CLI runs) against `server`. */
export function startAgent(h: Harness, serverAddress: string, opts: TestAgentOptions): TestAgent {
  const pki = testPKI();
  const identifiers = opts.identifiers ?? `ipv4=127.0.0.1&host=${opts.nodeName}`;
  // Issued only when the test brings none: each costs an RSA key.
  const tls =
    opts.tls ??
    ((): ServerConnectionOptions['tls'] => {
      const cert = pki.agent(opts.nodeName, identifiers);
      return { ca: pki.ca.cert, cert: cert.cert, key: cert.key };
    })();
  const log = new MemoryLogger(3);
  const clients = new ClientSet({
    connection: {
      address: serverAddress,
      tls,
      agentID: opts.nodeName,
      identifiers,
      dialer: new Dialer({ allowList: opts.allowList ?? AllowList.parse('127.0.0.0/8,::1/128'), timeoutMs: opts.dialTimeoutMs }),
      logger: opts.logger ?? log,
      ...opts.connection,
    },
    syncIntervalMs: opts.syncIntervalMs ?? 100,
    syncIntervalCapMs: 1000,
    probeIntervalMs: opts.probeIntervalMs ?? 0,
    logger: opts.logger ?? log,
  });
  clients.start();
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => (stopped ??= clients.close());
  h.defer(stop);
  return { clients, log, stop };
}

/** Starts a server and one agent `edge-1` (ipv4=127.0.0.1) and waits until it is registered. */
export async function startTunnel(
  h: Harness,
  opts: { server?: TestServerOptions; agent?: Partial<TestAgentOptions> } = {},
): Promise<{ server: TestServer; agent: TestAgent }> {
  const server = await startServer(h, opts.server);
  const agent = startAgent(h, server.agentAddress, { nodeName: 'edge-1', ...opts.agent });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  return { server, agent };
}

export interface ConnectResult {
  socket: Socket;
  /** The proxy's answer head (status line and headers), as text. */
  head: string;
  status: number;
  /** Body bytes of an error answer, or bytes that followed a 200 head. */
  rest: Buffer;
}

/**
 * Sends `CONNECT target` (plus extra header lines and early bytes) over the
 * Unix socket and reads the answer head. On a non-200 it also reads the body
 * until the proxy closes.
 */
export async function connectVia(
  udsPath: string,
  target: string,
  opts: { headers?: Record<string, string>; early?: Buffer; raw?: string } = {},
): Promise<ConnectResult> {
  const socket = connect(udsPath);
  await once(socket, 'connect');
  const headerLines = Object.entries(opts.headers ?? {})
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(opts.raw ?? `CONNECT ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headerLines}\r\n`);
  if (opts.early !== undefined) socket.write(opts.early);
  let buf = Buffer.alloc(0);
  for await (const chunk of readUntil(socket, () => buf.indexOf('\r\n\r\n') >= 0)) buf = Buffer.concat([buf, chunk]);
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) throw new Error(`proxy closed without an answer head (got ${JSON.stringify(buf.toString())})`);
  const head = buf.subarray(0, end + 4).toString('latin1');
  const status = Number(/^HTTP\/1\.1 (\d{3}) /.exec(head)?.[1] ?? NaN);
  let rest = buf.subarray(end + 4);
  if (status !== 200) {
    for await (const chunk of readUntil(socket, () => false)) rest = Buffer.concat([rest, chunk]);
  }
  return { socket, head, status, rest };
}

/** Yields chunks from `socket` until `done()` or the socket ends, then pauses it (leaving listeners clean). */
async function* readUntil(socket: Socket, done: () => boolean): AsyncGenerator<Buffer> {
  const queue: Buffer[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  const onData = (c: Buffer): void => {
    queue.push(c);
    wake?.();
  };
  const onEnd = (): void => {
    ended = true;
    wake?.();
  };
  socket.on('data', onData);
  socket.once('end', onEnd);
  socket.once('close', onEnd);
  socket.once('error', onEnd);
  try {
    for (;;) {
      while (queue.length > 0) {
        yield queue.shift()!;
        if (done()) return;
      }
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by the 'end' listener while we waited
      if (ended) return;
      await new Promise<void>((r) => (wake = r));
      wake = undefined;
    }
  } finally {
    socket.off('data', onData);
    socket.off('end', onEnd);
    socket.off('close', onEnd);
    socket.off('error', onEnd);
    socket.pause();
  }
}

/** A TCP server on 127.0.0.1 whose connections are handled by `onConnection`. */
export async function startTCPServer(h: Harness, onConnection: (s: Socket) => void): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    s.on('error', () => {});
    onConnection(s);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { server, port: (server.address() as AddressInfo).port, sockets };
}

/** A target that sends 64 KiB blocks to every connection as fast as it is let, until the connection goes. */
export function startFirehose(h: Harness): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const block = Buffer.alloc(64 * 1024, 7);
  return startTCPServer(h, (s) => {
    const pump = (): void => {
      while (!s.destroyed && s.write(block));
    };
    s.on('drain', pump);
    pump();
  });
}

/**
 * The churn tests' target: the client's first byte says how it behaves: 'c' answers "bye" and
 * closes first, 's' streams 16 KiB blocks until the connection goes, anything else echoes (that
 * byte too). `onConnection` sees each connection with its mode first, e.g. to watch how it ends.
 */
export function startChurnTarget(
  h: Harness,
  onConnection: (s: Socket, mode: string) => void = () => {},
): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  const block = Buffer.alloc(16 * 1024, 3);
  return startTCPServer(h, (s) => {
    s.once('data', (first: Buffer) => {
      const mode = String.fromCharCode(first[0]!);
      onConnection(s, mode);
      if (mode === 'c') s.end('bye');
      else if (mode === 's') {
        const pump = (): void => {
          while (!s.destroyed && s.writable && s.write(block));
        };
        s.on('drain', pump);
        pump();
      } else {
        s.write(first);
        s.pipe(s);
      }
    });
  });
}

/** An echo server: every byte comes back; closes when the client closes. */
export function startEchoServer(h: Harness): Promise<{ server: Server; port: number; sockets: Set<Socket> }> {
  return startTCPServer(h, (s) => s.pipe(s));
}

/**
 * A loopback TCP relay that sends each new connection to the next of `ports`
 * in turn, as a Service or load balancer in front of server replicas would;
 * the test may change `ports` while it runs. (startBlipRelay, for a test that
 * also wants the network to blip.)
 */
export async function startRoundRobin(h: Harness, ports: number[]): Promise<number> {
  return (await startBlipRelay(h, ports)).port;
}

/** CONNECTs through `udsPath` to `target`, sends `text`, half-closes, and returns all that came back. */
export async function roundTrip(udsPath: string, target: string, text: string, headers?: Record<string, string>): Promise<string> {
  const c = await connectVia(udsPath, target, headers === undefined ? {} : { headers });
  if (c.status !== 200) throw new Error(`CONNECT ${target} answered ${c.head.split('\r\n')[0]}`);
  c.socket.end(text);
  return Buffer.concat([c.rest, await readAll(c.socket)]).toString();
}

/** Reads everything until the socket ends or closes. */
export async function readAll(socket: Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of socket) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/**
 * A loopback port where connect() hangs: a listener (in a python3 child, which
 * never accepts) with backlog 0 and its accept queue already full, so the
 * kernel drops further SYNs. Gives a real dial timeout without leaving loopback.
 */
export async function startHangingListener(h: Harness): Promise<number> {
  const { spawn } = await import('node:child_process');
  const child = spawn(
    'python3',
    ['-c', "import socket,sys\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen(0)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()"],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  h.defer(async () => {
    if (child.exitCode === null) {
      child.kill('SIGKILL');
      await once(child, 'exit');
    }
  });
  const [line] = (await once(child.stdout, 'data')) as [Buffer];
  const port = Number(line.toString().trim());
  // One connection fills a backlog-0 queue; a second, whose SYN the kernel drops, makes sure.
  const first = connect(port, '127.0.0.1');
  first.on('error', () => {});
  h.defer(() => first.destroy());
  await once(first, 'connect');
  const second = connect(port, '127.0.0.1');
  second.on('error', () => {});
  h.defer(() => second.destroy());
  return port;
}

/**
 * A loopback port with nothing listening (connect is refused). Not for a port
 * a process is told to listen on: this one is in the ephemeral range, where any
 * listener on port 0 may take it first (CI saw a server's own master port take
 * its --meta-port); freeLowPort (hack/ports.ts) picks below that range.
 */
export async function closedPort(): Promise<number> {
  const s = createServer();
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** Reads exactly `n` bytes (starting with `initial`), resuming a paused socket. */
export async function readExactly(socket: Socket, n: number, initial: Buffer = Buffer.alloc(0)): Promise<Buffer> {
  const chunks = [initial];
  let have = initial.length;
  if (have >= n) return initial.subarray(0, n);
  return new Promise<Buffer>((resolve, reject) => {
    const onData = (c: Buffer): void => {
      chunks.push(c);
      have += c.length;
      if (have >= n) {
        cleanup();
        socket.pause();
        resolve(Buffer.concat(chunks).subarray(0, n));
      }
    };
    const onEnd = (): void => {
      cleanup();
      reject(new Error(`socket ended after ${have} of ${n} bytes`));
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(new Error(`socket failed after ${have} of ${n} bytes: ${err.message}`));
    };
    const cleanup = (): void => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onEnd);
      socket.off('error', onError);
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onEnd);
    // A write just before (EPIPE, ECONNRESET) fails here, not as an uncaught 'error'.
    socket.once('error', onError);
    socket.resume();
  });
}

/** A TCP relay to `targetPort` that can be frozen: it then forwards nothing, not even a close (a dead link). */
export async function startRelay(h: Harness, targetPort: number): Promise<{ port: number; freeze(): void; connections(): number }> {
  const relay = await startBlipRelay(h, [targetPort]);
  return { port: relay.port, freeze: () => relay.freeze(), connections: () => relay.connections() };
}

/** True when neither end holds a connection, a pending dial or a suspended session: what every churn ends with. */
export function tunnelTablesEmpty(server: TestServer, agent: TestAgent): boolean {
  return (
    server.tunnel.pendingDialCount === 0 &&
    server.tunnel.establishedCount() === 0 &&
    server.tunnel.sessions.suspendedCount === 0 &&
    agent.clients.connCount === 0 &&
    agent.clients.pendingDialCount === 0
  );
}
