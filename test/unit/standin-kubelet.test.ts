// The stand-in kubelet over real TLS: routes, client-certificate checks,
// keep-alive, logs with every option, follow streaming and its cleanup,
// large bodies, WebSocket exec and SPDY exec/port-forward end to end.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { request, Agent, type RequestOptions } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { connect as netConnect, createServer as createTCPServer, type Server as TCPServer, type Socket } from 'node:net';
import type { Writable } from 'node:stream';
import { test, type TestContext } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { harness, type Harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import {
  CHANNEL,
  PatternVerifier,
  StandinKubelet,
  dialTLS,
  forwardPatternEcho,
  openPortForward,
  patternView,
  readAll,
  readBody,
  readResponseHead,
  requestHead,
  upgradeToChannelWebSocket,
  upgradeToSpdy,
  type StandinKubeletOptions,
} from '../support/standin-kubelet/index.js';

/** Every test is bounded in time. */
const LIMIT = { timeout: 60_000 };

const MiB = 1024 * 1024;

let clientCert: { cert: string; key: string } | undefined;

/** The identity kube-apiserver presents to kubelets (made once: RSA keys are slow). */
function apiserverClientCert(): { cert: string; key: string } {
  clientCert ??= testPKI().issue({ commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'], usages: ['clientAuth'] });
  return clientCert;
}

async function startKubelet(h: Harness, opts: Partial<StandinKubeletOptions> = {}): Promise<StandinKubelet> {
  const pki = testPKI();
  const kubelet = new StandinKubelet({ cert: pki.server.cert, key: pki.server.key, clientCA: pki.ca.cert, ...opts });
  h.defer(() => kubelet.close());
  await kubelet.start();
  return kubelet;
}

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

function get(kubelet: StandinKubelet, path: string, extra: RequestOptions = {}): Promise<Answer> {
  const client = apiserverClientCert();
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: kubelet.port, path, ca: testPKI().ca.cert, cert: client.cert, key: client.key, agent: false, ...extra },
      (res) => {
        const parts: Buffer[] = [];
        res.on('data', (c: Buffer) => parts.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** A TLS connection as kube-apiserver makes it: its client certificate, no SNI. */
function dialKubelet(kubelet: StandinKubelet, h: Harness, alpn?: string[]): Promise<TLSSocket> {
  const client = apiserverClientCert();
  return dialTLS({
    host: '127.0.0.1',
    port: kubelet.port,
    ca: testPKI().ca.cert,
    cert: client.cert,
    key: client.key,
    servername: '',
    ...(alpn ? { ALPNProtocols: alpn } : {}),
  }).then((s) => {
    h.defer(() => s.destroy());
    return s;
  });
}

async function writePatternTo(w: Writable, total: number, chunk = 64 * 1024): Promise<void> {
  for (let off = 0; off < total; off += chunk) {
    if (!w.write(patternView(off, Math.min(chunk, total - off)))) await once(w, 'drain');
  }
  w.end();
}

test('healthz, metrics and stats/summary answer like a kubelet, and the request is recorded as seen', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h, { nodeName: 'edge-7' });

  const healthz = await get(kubelet, '/healthz');
  assert.equal(healthz.status, 200);
  assert.equal(healthz.headers['content-type'], 'text/plain; charset=utf-8');
  assert.equal(healthz.body.toString(), 'ok');

  const metrics = await get(kubelet, '/metrics');
  assert.equal(metrics.status, 200);
  assert.equal(metrics.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  assert.match(metrics.body.toString(), /^standin_kubelet_up 1$/m);

  const stats = await get(kubelet, '/stats/summary?only_cpu_and_memory=true');
  assert.equal(stats.status, 200);
  assert.equal(stats.headers['content-type'], 'application/json');
  assert.deepEqual(JSON.parse(stats.body.toString()), { node: { nodeName: 'edge-7', startTime: '2024-01-01T00:00:00Z' }, pods: [] });

  assert.equal((await get(kubelet, '/no/such/path')).status, 404);
  assert.equal((await get(kubelet, '/healthz', { method: 'DELETE' })).status, 405);

  const [first] = await kubelet.waitForRequests(1);
  assert.ok(first);
  assert.equal(first.method, 'GET');
  assert.equal(first.target, '/healthz');
  assert.deepEqual(first.clientSubject, { commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'] });
  assert.equal(first.tlsServername, false);
  assert.equal(first.headers[0]?.[0], 'Host');
  assert.equal(kubelet.requests.length, 5);
});

test('a client without a certificate, or with one from another CA, is refused during the handshake', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const pki = testPKI();

  await assert.rejects(get(kubelet, '/healthz', { cert: undefined, key: undefined }), (err: NodeJS.ErrnoException) => {
    assert.match(String(err.code), /CERTIFICATE_REQUIRED|ECONNRESET|EPIPE/);
    return true;
  });
  await assert.rejects(get(kubelet, '/healthz', { cert: pki.foreign.client.cert, key: pki.foreign.client.key }), (err: NodeJS.ErrnoException) => {
    assert.match(String(err.code), /UNKNOWN_CA|ECONNRESET|EPIPE|CERTIFICATE/);
    return true;
  });
  assert.equal(kubelet.requests.length, 0);
  assert.ok(kubelet.tlsClientErrors.length >= 2, `tlsClientErrors: ${JSON.stringify(kubelet.tlsClientErrors)}`);
  assert.equal((await get(kubelet, '/healthz')).status, 200);
});

test('one kept-alive connection carries 50 requests', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const client = apiserverClientCert();
  const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: testPKI().ca.cert, cert: client.cert, key: client.key });
  h.defer(() => agent.destroy());
  for (let i = 0; i < 50; i++) {
    const path = i % 2 === 0 ? '/healthz' : '/containerLogs/default/p1/c1';
    const answer = await get(kubelet, path, { agent });
    assert.equal(answer.status, 200);
  }
  assert.equal(kubelet.requests.length, 50);
  assert.equal(kubelet.connectionsAccepted, 1);
  assert.ok(kubelet.requests.every((r) => r.connection === kubelet.requests[0]!.connection));
});

test('containerLogs applies tailLines, timestamps, sinceSeconds and limitBytes, and rejects bad values', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const logs = async (query: string): Promise<Answer> => get(kubelet, `/containerLogs/default/p1/c1${query}`);

  const plain = await logs('');
  assert.equal(plain.status, 200);
  assert.equal(plain.headers['content-type'], 'text/plain; charset=utf-8');
  assert.equal(plain.body.toString(), 'line 1\nline 2\nline 3\n');
  assert.equal((await logs('?tailLines=2&timestamps=true')).body.toString(), '2024-01-01T00:00:00.000000000Z line 2\n2024-01-01T00:00:01.000000000Z line 3\n');
  assert.equal((await logs('?tailLines=0')).body.toString(), '');
  assert.equal((await logs('?sinceSeconds=10')).body.toString(), 'line 1\nline 2\nline 3\n');
  const limited = await logs('?limitBytes=5');
  assert.equal(limited.body.toString(), 'line ');
  assert.equal(limited.headers['content-length'], '5');

  assert.equal((await logs('?tailLines=abc')).status, 400);
  assert.equal((await logs('?follow=maybe')).status, 400);
  assert.equal((await logs('?tailLines=-1')).status, 422);
  assert.equal((await logs('?limitBytes=0')).status, 422);
  assert.equal((await logs('?sinceSeconds=0')).status, 422);
  assert.equal((await get(kubelet, '/containerLogs/default/p1')).status, 404);
});

test('follow streams a line per interval, each its own chunk, and stops within a second of the caller leaving', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h, { followIntervalMs: 20 });
  const socket = await dialKubelet(kubelet, h);
  const sentAt = performance.now();
  socket.write(
    requestHead('GET', '/containerLogs/default/p1/c1?follow=true&limitBytes=100000', [
      ['Host', `127.0.0.1:${kubelet.port}`],
      ['User-Agent', 'Go-http-client/1.1'],
      ['Accept-Encoding', 'gzip'],
    ]),
  );
  const { head, rest } = await readResponseHead(socket);
  assert.equal(head.status, 200);
  assert.equal(head.headers.find(([k]) => k === 'Transfer-Encoding')?.[1], 'chunked');

  let text = rest.toString('latin1');
  let firstFollowAt = -1;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "follow 5" within 3 s; got ${JSON.stringify(text)}`)), 3000);
    const onData = (chunk: Buffer): void => {
      text += chunk.toString('latin1');
      if (firstFollowAt < 0 && text.includes('follow 1\n')) firstFollowAt = performance.now();
      if (text.includes('\r\nfollow 5\n\r\n')) {
        clearTimeout(timer);
        socket.removeListener('data', onData);
        resolve();
      }
    };
    socket.on('data', onData);
    socket.resume();
  });
  // Each line is one chunk: "<hex size>\r\n<line>\r\n".
  assert.match(text, /^7\r\nline 1\n\r\n7\r\nline 2\n\r\n7\r\nline 3\n\r\n9\r\nfollow 1\n\r\n9\r\nfollow 2\n\r\n/);
  assert.ok(firstFollowAt - sentAt < 1000, `first follow line after ${Math.round(firstFollowAt - sentAt)} ms`);
  const [follow] = kubelet.followStreams;
  assert.ok(follow);
  assert.ok(follow.lineTimes[0]! - follow.startedAt < 500, 'the first follow line is written one interval after the start');

  const leftAt = performance.now();
  socket.destroy();
  const [ended] = await kubelet.waitForFollowEnded(1, 2000);
  assert.ok(ended);
  assert.equal(ended.endReason, 'client-gone');
  assert.ok(ended.endedAt! - leftAt < 1000, `follow stream ended ${Math.round(ended.endedAt! - leftAt)} ms after the caller left`);
  const written = ended.linesWritten;
  // Five more intervals, counted by a second follow that ends with its fifth line (limitBytes): the first writes nothing meanwhile.
  const second = await get(kubelet, `/containerLogs/default/p1/c1?follow=true&limitBytes=${'line 1\nline 2\nline 3\n'.length + 5 * 'follow 1\n'.length}`);
  assert.match(second.body.toString(), /\nfollow 5\n$/);
  assert.equal(ended.linesWritten, written, 'no lines after the end');
  assert.equal(kubelet.followStreamsEnded, 2);
});

test('GET /bytes streams 100 MiB of the pattern, byte-exact', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const client = apiserverClientCert();
  const total = 100 * MiB;
  const verifier = new PatternVerifier();
  const status = await new Promise<number>((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: kubelet.port, path: `/bytes?n=${total}`, ca: testPKI().ca.cert, cert: client.cert, key: client.key, agent: false },
      (res) => {
        assert.equal(res.headers['content-length'], String(total));
        res.on('data', (c: Buffer) => verifier.update(c));
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', reject);
      },
    );
    req.setTimeout(60_000, () => req.destroy(new Error('100 MiB not done in 60 s')));
    req.on('error', reject);
    req.end();
  });
  assert.equal(status, 200);
  assert.equal(verifier.received, total);
  assert.equal((await get(kubelet, '/bytes?n=-1')).status, 400);
  assert.equal((await get(kubelet, '/bytes')).status, 400);
});

test('WebSocket v5 exec echoes 10 MiB of stdin byte-exact, then sends Success and closes', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const socket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { client, head } = await upgradeToChannelWebSocket({
    socket,
    target: '/exec/default/p1/c1?command=cat&error=1&input=1&output=1',
    protocols: ['v5.channel.k8s.io'],
  });
  assert.equal(head.status, 101);
  assert.equal(client.protocol, 'v5.channel.k8s.io');

  const total = 10 * MiB;
  const stdout = new PatternVerifier();
  const errorChannel: Buffer[] = [];
  client.on('data', (channel: number, piece: Buffer) => {
    if (channel === CHANNEL.stdout) stdout.update(piece);
    else if (channel === CHANNEL.error) errorChannel.push(piece);
  });
  let pongs = 0;
  client.on('pong', () => pongs++);
  const closeFrame = once(client, 'closeFrame');

  const chunk = 32 * 1024;
  for (let off = 0, i = 0; off < total; off += chunk, i++) {
    // Some messages in three frames, and a ping now and then, between data frames.
    if (!client.write(CHANNEL.stdin, patternView(off, Math.min(chunk, total - off)), i % 7 === 0 ? 3 : 1)) await client.drained();
    if (i % 50 === 0) client.ping(Buffer.from(`p${i}`));
  }
  client.closeChannel(CHANNEL.stdin);

  const [frame] = (await closeFrame) as [{ code: number }];
  assert.equal(frame.code, 1000);
  assert.equal(stdout.received, total);
  assert.deepEqual(JSON.parse(Buffer.concat(errorChannel).toString()), { metadata: {}, status: 'Success' });
  assert.ok(pongs > 0);
  if (!socket.closed) await once(socket, 'close');
});

test('a v1.24-like stand-in speaks v4.channel.k8s.io: echo output, and a failing command reports its exit code', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h, { execWebSocketProtocols: ['v4.channel.k8s.io'] });
  const run = async (query: string): Promise<{ out: Map<number, string>; code: number }> => {
    const socket = await dialKubelet(kubelet, h, ['http/1.1']);
    const { client } = await upgradeToChannelWebSocket({
      socket,
      target: `/exec/default/p1/c1?${query}`,
      protocols: ['v5.channel.k8s.io', 'v4.channel.k8s.io'],
    });
    assert.equal(client.protocol, 'v4.channel.k8s.io');
    const out = new Map<number, string>();
    client.on('data', (channel: number, piece: Buffer) => out.set(channel, (out.get(channel) ?? '') + piece.toString()));
    const [frame] = (await once(client, 'closeFrame')) as [{ code: number }];
    if (!socket.closed) await once(socket, 'close');
    return { out, code: frame.code };
  };
  const echo = await run('command=echo&command=hi&error=1&output=1');
  assert.equal(echo.out.get(CHANNEL.stdout), 'hi\n');
  assert.deepEqual(JSON.parse(echo.out.get(CHANNEL.error) ?? ''), { metadata: {}, status: 'Success' });
  assert.equal(echo.code, 1000);
  const failing = await run('command=false&error=1&output=1');
  const status = JSON.parse(failing.out.get(CHANNEL.error) ?? '') as { status: string; reason: string; details: { causes: Array<{ message: string }> } };
  assert.equal(status.status, 'Failure');
  assert.equal(status.reason, 'NonZeroExitCode');
  assert.equal(status.details.causes[0]?.message, '1');
});

test('SPDY exec (what kubectl falls back to) runs with v4: stdin echoed, Success on the error stream, then GOAWAY', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const socket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { session, protocol } = await upgradeToSpdy({
    socket,
    target: '/exec/default/p1/c1?command=cat&error=1&input=1&output=1',
    protocols: ['v5.channel.k8s.io', 'v4.channel.k8s.io', 'v3.channel.k8s.io', 'v2.channel.k8s.io', 'channel.k8s.io'],
  });
  assert.equal(protocol, 'v4.channel.k8s.io');
  const error = await session.openStream({ streamtype: 'error' });
  error.end();
  const stdin = await session.openStream({ streamtype: 'stdin' });
  const stdout = await session.openStream({ streamtype: 'stdout' });
  stdout.end();
  const stderr = await session.openStream({ streamtype: 'stderr' });
  stderr.end();
  const verifier = new PatternVerifier();
  stdout.on('data', (c: Buffer) => verifier.update(c));
  const stdoutEnded = once(stdout, 'end');
  const errorText = readAll(error);
  const stderrText = readAll(stderr);
  await writePatternTo(stdin, 3 * MiB);
  await stdoutEnded;
  assert.equal(verifier.received, 3 * MiB);
  assert.deepEqual(JSON.parse((await errorText).toString()), { metadata: {}, status: 'Success' });
  assert.equal((await stderrText).length, 0);
  if (!socket.closed) await once(socket, 'close');
});

async function startEchoServer(h: Harness): Promise<TCPServer> {
  const sockets = new Set<Socket>();
  const server = createTCPServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
    s.pipe(s);
  });
  h.defer(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return server;
}

test('SPDY port-forward relays two concurrent connections to a local echo server, byte-exact', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const echoPort = (echo.address() as { port: number }).port;
  const kubelet = await startKubelet(h, { portForwardTargets: { 80: { host: '127.0.0.1', port: echoPort } } });

  // kubectl v1.32 first tries WebSocket; a v1.24-like kubelet refuses it, and kubectl falls back to SPDY.
  const wsTry = await dialKubelet(kubelet, h, ['http/1.1']);
  await assert.rejects(upgradeToChannelWebSocket({ socket: wsTry, target: '/portForward/default/p1', protocols: ['SPDY/3.1+portforward.k8s.io'] }), {
    status: 403,
  });

  const socket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { session, protocol } = await upgradeToSpdy({ socket, target: '/portForward/default/p1', protocols: ['portforward.k8s.io'] });
  assert.equal(protocol, 'portforward.k8s.io');
  assert.ok((await session.ping()) >= 0);

  const results = await Promise.all([forwardPatternEcho(session, 80, 0, 4 * MiB), forwardPatternEcho(session, 80, 1, 3 * MiB + 17)]);
  assert.deepEqual(results, [
    { echoed: 4 * MiB, errorText: '' },
    { echoed: 3 * MiB + 17, errorText: '' },
  ]);

  assert.deepEqual(kubelet.portForwards.map((p) => [p.requestId, p.port, p.bytesToTarget, p.error]).sort(), [
    ['0', 80, 4 * MiB, null],
    ['1', 80, 3 * MiB + 17, null],
  ]);

  // A pod port with no target: the failure arrives as text on the error stream, the data stream just ends.
  const missing = await openPortForward(session, 81, 2);
  missing.data.resume();
  assert.match((await readAll(missing.error)).toString(), /error forwarding port 81 to pod default\/p1/);
  missing.data.end();

  session.close();
  await once(session, 'close');
});

test('garbage never crashes it: raw bytes, a bad HTTP head, bad WebSocket frames and bad SPDY frames', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);

  // Not TLS at all.
  const raw = netConnect({ host: '127.0.0.1', port: kubelet.port });
  h.defer(() => raw.destroy());
  await once(raw, 'connect');
  raw.end(Buffer.from('\x16\x03\x01\x00\x05hello garbage \x00\xff\xfe'));
  raw.resume();
  await once(raw, 'close');

  // TLS, then not HTTP.
  const tlsGarbage = await dialKubelet(kubelet, h);
  tlsGarbage.write(Buffer.from('\x00\x01\x02 NOT HTTP\r\n\r\n'));
  const { head: badHead } = await readResponseHead(tlsGarbage);
  assert.equal(badHead.status, 400);
  assert.ok(kubelet.httpClientErrors.length >= 1);

  // A WebSocket exec session fed an unmasked frame: close 1002.
  const wsSocket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { client } = await upgradeToChannelWebSocket({
    socket: wsSocket,
    target: '/exec/default/p1/c1?command=cat&input=1&output=1',
    protocols: ['v5.channel.k8s.io'],
  });
  const closed = once(client, 'closeFrame');
  wsSocket.write(Buffer.from([0x82, 0x02, 0x00, 0x41]));
  const [frame] = (await closed) as [{ code: number }];
  assert.equal(frame.code, 1002);

  // A SPDY session fed a control frame of another version: GOAWAY and close.
  const spdySocket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { session } = await upgradeToSpdy({ socket: spdySocket, target: '/portForward/default/p1', protocols: ['portforward.k8s.io'] });
  const goaway = once(session, 'goaway');
  spdySocket.write(Buffer.from('8002000100000004deadbeef', 'hex'));
  const [g] = (await goaway) as [{ status: number }];
  assert.equal(g.status, 1);
  if (!session.closed) await once(session, 'close');

  // Upgrade refusals are precise.
  const noHeader = await dialKubelet(kubelet, h, ['http/1.1']);
  noHeader.write(
    requestHead('POST', '/exec/default/p1/c1?command=ls&output=1', [
      ['Host', 'x'],
      ['Content-Length', '0'],
      ['Connection', 'Upgrade'],
      ['Upgrade', 'SPDY/3.1'],
    ]),
  );
  const r1 = await readResponseHead(noHeader);
  assert.equal(r1.head.status, 400);
  assert.match((await readBody(noHeader, r1.head, r1.rest)).toString(), /X-Stream-Protocol-Version is required/);
  assert.equal((await get(kubelet, '/exec/default/p1/c1?command=ls&output=1')).status, 400);
  assert.equal((await get(kubelet, '/exec/default/p1/c1?output=1')).status, 400);

  assert.equal((await get(kubelet, '/healthz')).status, 200);
});

test('close() is idempotent and frees every connection, session and timer it made', LIMIT, async (t: TestContext) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const kubelet = await startKubelet(h, { portForwardTargets: { 80: { host: '127.0.0.1', port: (echo.address() as { port: number }).port } } });

  const follow = await dialKubelet(kubelet, h);
  follow.write(requestHead('GET', '/containerLogs/default/p1/c1?follow=true', [['Host', 'x']]));
  await readResponseHead(follow);
  follow.resume();

  const ws = await dialKubelet(kubelet, h, ['http/1.1']);
  await upgradeToChannelWebSocket({ socket: ws, target: '/attach/default/p1/c1?input=1&output=1', protocols: ['v5.channel.k8s.io'] });

  const spdySocket = await dialKubelet(kubelet, h, ['http/1.1']);
  const { session } = await upgradeToSpdy({ socket: spdySocket, target: '/portForward/default/p1', protocols: ['portforward.k8s.io'] });
  const pf = await openPortForward(session, 80, 0);
  pf.data.on('error', () => undefined);
  pf.data.resume();
  pf.data.write('hello');
  // A half-made pair (error stream only) holds a stream-creation timer.
  await session.openStream({ streamtype: 'error', port: '80', requestid: '9' });
  assert.ok(kubelet.openSockets >= 4);

  const first = kubelet.close();
  const second = kubelet.close();
  await Promise.all([first, second]);
  assert.equal(kubelet.openSockets, 0);
  assert.equal(kubelet.followStreamsEnded, 1);
  assert.equal(kubelet.followStreams[0]?.endReason, 'server-closed');
  await assert.rejects(kubelet.start(), /already/);
});
