// The GRPC egress frontend without kube-apiserver: a client that sends exactly
// kube-apiserver's recorded headers (`:authority` = the socket path), and a
// grpc-js ProxyService client, through a real server and agent.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import grpc from '@grpc/grpc-js';
import { GrpcProxyServer } from '../../pkg/frontend/grpc-proxy.js';
import { GrpcDeframer, grpcFrameHeader } from '../../pkg/grpc/frame.js';
import { decodePacket, encodePacket } from '../../pkg/protocol/codec.js';
import type { KnownPacket, Packet } from '../../pkg/protocol/packet.js';
import { kubeAPIServerFixture } from '../support/fixtures.js';
import { harness, type Harness } from '../support/harness.js';
import { konnectivityProtos, type UpstreamPacket } from '../support/upstream.js';
import { startEchoServer, startTCPServer, startTunnel, tempDir, waitFor } from '../support/tunnel.js';

const fixture = kubeAPIServerFixture<{ proxyStreams: { http2RequestHeaders?: [string, string][] }[] }>('egress-grpc');
const RECORDED_HEADERS = fixture[0]!.proxyStreams[0]!.http2RequestHeaders!;

/** A ProxyService stream opened with kube-apiserver's recorded headers, `<scratch>/egress.sock` filled in. */
function recordedCall(
  h: Harness,
  path: string,
): { send(p: KnownPacket): void; next(): Promise<Packet>; end(): void; status: Promise<string>; closed: Promise<void> } {
  const session = http2.connect('http://localhost', { createConnection: () => connect(path) });
  session.on('error', () => {});
  h.defer(() => session.destroy());
  const headers: Record<string, string> = {};
  for (const [name, value] of RECORDED_HEADERS) headers[name] = value.replace('<scratch>/egress.sock', path);
  assert.equal(headers[':authority'], path);
  const stream = session.request(headers, { endStream: false });
  stream.on('error', () => {});
  const deframer = new GrpcDeframer();
  const queue: Packet[] = [];
  const waiters: ((p: Packet) => void)[] = [];
  stream.on('data', (chunk: Buffer) => {
    for (const m of deframer.push(chunk)) {
      const p = decodePacket(m);
      const w = waiters.shift();
      if (w) w(p);
      else queue.push(p);
    }
  });
  const status = new Promise<string>((resolve) => stream.once('trailers', (t: http2.IncomingHttpHeaders) => resolve(String(t['grpc-status']))));
  const closed = new Promise<void>((resolve) => stream.once('close', () => resolve()));
  return {
    send: (p) => {
      const body = encodePacket(p);
      stream.write(Buffer.concat([grpcFrameHeader(body.length), body]));
    },
    next: () => new Promise((resolve) => (queue.length > 0 ? resolve(queue.shift()!) : waiters.push(resolve))),
    end: () => stream.end(),
    status,
    closed,
  };
}

async function startEgress(h: Harness, dialRequestTimeoutMs?: number): Promise<{ path: string; server: Awaited<ReturnType<typeof startTunnel>>['server'] }> {
  const { server } = await startTunnel(h);
  const path = join(await tempDir(h), 'egress.sock');
  const egress = new GrpcProxyServer(server.tunnel, {
    path,
    nodeNameOf: (host) => (host === '127.0.0.1' ? 'edge-1' : undefined),
    ...(dialRequestTimeoutMs !== undefined ? { dialRequestTimeoutMs } : {}),
  });
  await egress.start();
  h.defer(() => egress.close());
  return { path, server };
}

test("kube-apiserver's recorded headers (:authority = the socket path): dial, 16 MiB echo byte-exact, CLOSE_REQ answered with CLOSE_RSP", async (t) => {
  const h = harness(t);
  const { path } = await startEgress(h);
  const echo = await startEchoServer(h);
  const call = recordedCall(h, path);
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: 932131510788382616n });
  const rsp = await call.next();
  assert.equal(rsp.type, 'DIAL_RSP');
  assert.equal(rsp.random, 932131510788382616n);
  assert.equal(rsp.error, '');
  const payload = randomBytes(16 * 1024 * 1024);
  const received: Buffer[] = [];
  let got = 0;
  const echoed = (async () => {
    while (got < payload.length) {
      const p = await call.next();
      assert.equal(p.type, 'DATA');
      assert.equal(p.connectID, rsp.connectID);
      received.push(p.data);
      got += p.data.length;
    }
  })();
  for (let off = 0; off < payload.length; off += 32 * 1024) {
    call.send({ type: 'DATA', connectID: rsp.connectID, error: '', data: payload.subarray(off, off + 32 * 1024) });
  }
  await echoed;
  assert.ok(Buffer.concat(received).equals(payload), 'byte-exact');
  call.send({ type: 'CLOSE_REQ', connectID: rsp.connectID });
  const close = await call.next();
  assert.deepEqual(close, { type: 'CLOSE_RSP', connectID: rsp.connectID, error: '' });
  call.end();
  assert.equal(await call.status, '0');
  await waitFor('the echo server to see the close', () => echo.sockets.size === 0);
});

test('when the far end closes, CLOSE_RSP comes unasked and the stream ends', async (t) => {
  const h = harness(t);
  const { path } = await startEgress(h);
  const target = await startTCPServer(h, (s) => s.end('bye'));
  const call = recordedCall(h, path);
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${target.port}`, random: 7n });
  const rsp = await call.next();
  assert.equal(rsp.type, 'DIAL_RSP');
  const data = await call.next();
  assert.equal(data.type === 'DATA' && data.data.toString(), 'bye');
  const close = await call.next();
  assert.equal(close.type, 'CLOSE_RSP');
  assert.equal(await call.status, '0');
});

test('a dial to an address no agent serves fails at once with a DIAL_RSP naming it; a refused dial names the cause', async (t) => {
  const h = harness(t);
  const { path } = await startEgress(h);
  const call = recordedCall(h, path);
  const started = performance.now();
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: '10.9.9.9:10250', random: 42n });
  const rsp = await call.next();
  assert.ok(performance.now() - started < 1000);
  assert.equal(rsp.type, 'DIAL_RSP');
  assert.equal(rsp.random, 42n);
  assert.match(rsp.error, /no agent serves 10\.9\.9\.9/);
  await call.closed;

  const refused = recordedCall(h, path);
  const { closedPort } = await import('../support/tunnel.js');
  refused.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${await closedPort()}`, random: 43n });
  const r2 = await refused.next();
  assert.ok(
    r2.type === 'DIAL_RSP' && /^node edge-1: .*ECONNREFUSED|refused/.test(r2.error),
    JSON.stringify(r2, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v)),
  );
});

test('a grpc-js ProxyService client: dial, echo, CLOSE_REQ', async (t) => {
  const h = harness(t);
  const { path } = await startEgress(h);
  const echo = await startEchoServer(h);
  const ProxyService = konnectivityProtos().ProxyService as grpc.ServiceClientConstructor;
  const client = new ProxyService(`unix:${path}`, grpc.credentials.createInsecure());
  h.defer(() => client.close());
  const call = (client as unknown as { Proxy(): grpc.ClientDuplexStream<UpstreamPacket, UpstreamPacket> }).Proxy();
  call.on('error', () => {});
  const packets: UpstreamPacket[] = [];
  call.on('data', (p: UpstreamPacket) => packets.push(p));
  call.write({ type: 'DIAL_REQ', dialRequest: { protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: '5' } });
  await waitFor('DIAL_RSP', () => packets.length === 1);
  const connectID = packets[0]!.dialResponse!.connectID;
  assert.equal(packets[0]!.dialResponse!.error, '');
  call.write({ type: 'DATA', data: { connectID, error: '', data: Buffer.from('through grpc-js') } });
  await waitFor('the echo', () => packets.length === 2);
  assert.equal(packets[1]!.data!.data.toString(), 'through grpc-js');
  call.write({ type: 'CLOSE_REQ', closeRequest: { connectID } });
  await waitFor('CLOSE_RSP', () => packets.length === 3);
  assert.equal(packets[2]!.type, 'CLOSE_RSP');
  call.end();
});

test('a stream that sends no DIAL_REQ is ended with DEADLINE_EXCEEDED', async (t) => {
  const h = harness(t);
  const { path } = await startEgress(h, 300);
  const call = recordedCall(h, path);
  assert.equal(await call.status, '4');
});
