// The GRPC egress frontend without kube-apiserver: a client that sends exactly
// kube-apiserver's recorded headers (`:authority` = the socket path), and a
// grpc-js ProxyService client, through a real server and agent.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import grpc from '@grpc/grpc-js';
import { GrpcProxyServer } from '../../pkg/frontend/grpc-proxy.js';
import { kubeAPIServerFixture } from '../support/fixtures.js';
import { exposedGc } from '../support/gc.js';
import { harness, type Harness } from '../support/harness.js';
import { H2_PREFACE, h2Frame } from '../support/http2-frames.js';
import { proxyCall, type ProxyCall } from '../support/proxy-call.js';
import { konnectivityProtos, type UpstreamPacket } from '../support/upstream.js';
import { startEchoServer, startTCPServer, startTunnel, tempDir, waitFor } from '../support/tunnel.js';

const fixture = kubeAPIServerFixture<{ proxyStreams: { http2RequestHeaders?: [string, string][] }[] }>('egress-grpc');
const RECORDED_HEADERS = fixture[0]!.proxyStreams[0]!.http2RequestHeaders!;

/** A ProxyService stream opened with kube-apiserver's recorded headers, `<scratch>/egress.sock` filled in. */
function recordedCall(h: Harness, path: string): ProxyCall {
  const headers: Record<string, string> = {};
  for (const [name, value] of RECORDED_HEADERS) headers[name] = value.replace('<scratch>/egress.sock', path);
  assert.equal(headers[':authority'], path);
  return proxyCall(h, path, headers);
}

async function startEgress(
  h: Harness,
  dialRequestTimeoutMs?: number,
): Promise<{ path: string; server: Awaited<ReturnType<typeof startTunnel>>['server']; egress: GrpcProxyServer }> {
  const { server } = await startTunnel(h);
  const path = join(await tempDir(h), 'egress.sock');
  const egress = new GrpcProxyServer(server.tunnel, {
    path,
    nodeNameOf: (host) => (host === '127.0.0.1' ? 'edge-1' : undefined),
    ...(dialRequestTimeoutMs !== undefined ? { dialRequestTimeoutMs } : {}),
  });
  await egress.start();
  h.defer(() => egress.close());
  return { path, server, egress };
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

/** A client that sends `opening`, then trickles `trickle` 16 KiB every 2 ms until the server closes; what it received. */
async function trickler(h: Harness, path: string, opening: Buffer, trickle: Buffer): Promise<{ received: Buffer; closed: boolean }> {
  const socket: Socket = connect(path);
  h.defer(() => socket.destroy());
  socket.on('error', () => {});
  const received: Buffer[] = [];
  socket.on('data', (c: Buffer) => received.push(c));
  const state = { closed: false };
  const close = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  void close.then(() => (state.closed = true));
  socket.once('end', () => (state.closed = true));
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write(Buffer.concat([H2_PREFACE, h2Frame(0x4, 0, 0, Buffer.alloc(0)), opening]));
  for (let at = 0; at < trickle.length && !state.closed; at += 16 * 1024) {
    socket.write(trickle.subarray(at, at + 16 * 1024));
    await sleep(2);
  }
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([close, new Promise((resolve) => (timer = setTimeout(resolve, 2000)))]);
  clearTimeout(timer);
  return { received: Buffer.concat(received), closed: state.closed };
}

/** The GOAWAY among the frames a server sent: its error code and debug text. */
function goawayIn(bytes: Buffer): { code: number; debug: string } | undefined {
  for (let pos = 0; pos + 9 <= bytes.length;) {
    const length = bytes.readUIntBE(pos, 3);
    if (bytes[pos + 3] === 0x7) {
      const payload = bytes.subarray(pos + 9, pos + 9 + length);
      return { code: payload.readUInt32BE(4), debug: payload.subarray(8).toString('latin1') };
    }
    pos += 9 + length;
  }
  return undefined;
}

test('20 clients trickling declared 16 MiB frames or an endless header block: each gets a GOAWAY naming why, memory and CPU stay flat', async (t) => {
  const h = harness(t);
  const { path, egress } = await startEgress(h);
  const echo = await startEchoServer(h);
  const gc = exposedGc();
  const head = (type: number, length: number): Buffer => {
    const b = h2Frame(type, 0, 1, Buffer.alloc(0));
    b.writeUIntBE(length, 0, 3);
    return b;
  };
  const zeros = Buffer.alloc(4 * 1024 * 1024);
  const block = Buffer.alloc(16_384, 0x82);
  const continuations = Buffer.concat(Array.from({ length: 255 }, () => h2Frame(0x9, 0, 1, block)));
  const kinds = [
    {
      name: 'DATA',
      opening: head(0x0, 2 ** 24 - 1),
      trickle: zeros,
      code: http2.constants.NGHTTP2_FRAME_SIZE_ERROR,
      reason: /declares 16777215 bytes, more than the SETTINGS_MAX_FRAME_SIZE of 16384/,
    },
    { name: 'HEADERS', opening: head(0x1, 2 ** 24 - 1), trickle: zeros, code: http2.constants.NGHTTP2_FRAME_SIZE_ERROR, reason: /declares 16777215 bytes/ },
    {
      name: 'CONTINUATIONs',
      opening: h2Frame(0x1, 0, 1, block),
      trickle: continuations,
      code: http2.constants.NGHTTP2_COMPRESSION_ERROR,
      reason: /header block of stream 1 is larger than the SETTINGS_MAX_HEADER_LIST_SIZE of 65535 bytes/,
    },
  ];
  gc();
  gc();
  const before = process.memoryUsage().arrayBuffers;
  let peak = before;
  const sampling = { on: true };
  const sampler = (async () => {
    while (sampling.on) {
      peak = Math.max(peak, process.memoryUsage().arrayBuffers);
      await sleep(10);
    }
  })();
  const cpu = process.cpuUsage();
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => trickler(h, path, kinds[i % 3]!.opening, kinds[i % 3]!.trickle)));
  const used = process.cpuUsage(cpu);
  const cpuMs = (used.user + used.system) / 1000;
  sampling.on = false;
  await sampler;
  const mib = (n: number): string => (n / 2 ** 20).toFixed(1);
  t.diagnostic(`flood: ${cpuMs.toFixed(0)} ms CPU, array buffers +${mib(peak - before)} MiB at peak`);
  // The old filter held every trickled byte (4 MiB a client here) and copied all it held again per chunk.
  assert.ok(peak - before < 16 * 1024 * 1024, `array buffers grew by ${mib(peak - before)} MiB during the flood`);
  assert.ok(cpuMs < 1500, `the flood took ${cpuMs.toFixed(0)} ms of CPU`);
  results.forEach((r, i) => {
    const kind = kinds[i % 3]!;
    assert.ok(r.closed, `client ${i} (${kind.name}) was not closed`);
    const goaway = goawayIn(r.received);
    assert.ok(goaway !== undefined, `client ${i} (${kind.name}) got no GOAWAY`);
    assert.equal(goaway.code, kind.code, `client ${i} (${kind.name}): ${goaway.debug}`);
    assert.match(goaway.debug, kind.reason);
  });
  await waitFor('the server to drop every refused client', () => egress.connectionCount === 0);
  gc();
  gc();
  const after = process.memoryUsage().arrayBuffers;
  t.diagnostic(`array buffers +${mib(after - before)} MiB after the clients closed`);
  assert.ok(after - before < 8 * 1024 * 1024, `array buffers ${mib(after - before)} MiB above the start after the clients closed`);

  // And it still serves: kube-apiserver's call dials and echoes.
  const call = recordedCall(h, path);
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: 9n });
  const rsp = await call.next();
  assert.equal(rsp.type === 'DIAL_RSP' && rsp.error, '');
  call.send({ type: 'DATA', connectID: rsp.type === 'DIAL_RSP' ? rsp.connectID : 0n, error: '', data: Buffer.from('still here') });
  const back = await call.next();
  assert.equal(back.type === 'DATA' && back.data.toString(), 'still here');
  call.end();
});
