// The egress socket's direct dials (--egress-direct-dial): kube-apiserver's
// `cluster` egress selection sends it every connection, so what no agent
// serves and names no edge node (a cloud node's kubelet, a webhook, an
// aggregated API) is dialled by the server itself; an edge node's stays in
// the tunnel, with its 503 when no agent serves it. The frontends are built
// as the server builds them (frontendsFor), with the edge-node test the
// Node informer gives in cluster mode as a plain predicate.
//
// Agent edge-1 advertises 127.0.0.9; edge-2 (127.0.0.10) is an edge node with
// no agent. Targets on 127.0.0.1 are neither: "cloud" hosts.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { connect, createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { once } from 'node:events';
import { Registry } from 'prom-client';
import type { DirectDialer } from '../../pkg/frontend/direct-dial.js';
import { frontendsFor, type EgressFrontend } from '../../pkg/server/components.js';
import type { EgressDirectDial, EgressSelectorMode } from '../../pkg/server/options.js';
import { harness, type Harness } from '../support/harness.js';
import { startMaster } from '../support/master.js';
import { proxyCall } from '../support/proxy-call.js';
import { testServerOptions } from '../support/server-options.js';
import {
  closedPort,
  connectVia,
  readAll,
  readExactly,
  startEchoServer,
  startHangingListener,
  startTCPServer,
  startTunnel,
  tempDir,
  type TestServer,
} from '../support/tunnel.js';

const EDGE_HOSTS = new Set(['edge-1', '127.0.0.9', 'edge-2', '127.0.0.10']);
const isEdgeNode = (host: string): boolean => EDGE_HOSTS.has(host);

async function startEgress(
  h: Harness,
  server: TestServer,
  mode: EgressSelectorMode,
  opts: { directDial?: EgressDirectDial; clusterMode?: boolean; registry?: Registry; dialTimeoutMs?: number } = {},
): Promise<{ path: string; proxierPath: string; registry: Registry; direct: DirectDialer | undefined }> {
  const dir = await tempDir(h);
  const registry = opts.registry ?? new Registry();
  const path = join(dir, 'egress.sock');
  const serverOpts = testServerOptions(dir, {
    egressSelector: { uds: path, mode, ...(opts.directDial !== undefined ? { directDial: opts.directDial } : {}) },
    metricsRegistry: registry,
    logger: server.log,
    ...(opts.dialTimeoutMs !== undefined ? { dialTimeoutMs: opts.dialTimeoutMs } : {}),
  });
  const { proxier, egress, direct } = frontendsFor(server.tunnel, () => undefined, serverOpts, opts.clusterMode === false ? undefined : isEdgeNode);
  const started: (EgressFrontend | typeof proxier)[] = [proxier, egress!];
  for (const f of started) {
    h.defer(() => f.close());
    await f.start();
  }
  return { path, proxierPath: serverOpts.interceptorProxierUDS, registry, direct };
}

async function directDials(registry: Registry): Promise<Record<string, number>> {
  const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === 'yurttunnel_server_direct_dials_total');
  const counts: Record<string, number> = {};
  for (const v of (metric?.values ?? []) as { labels: { result?: string }; value: number }[]) counts[v.labels.result ?? ''] = v.value;
  return counts;
}

/** A listener on `host` that counts the connections it got (none may come for an edge node). */
async function countingListener(h: Harness, host: string): Promise<{ port: number; accepted: () => number }> {
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    accepted++;
    sockets.add(s);
    s.destroy();
  });
  server.listen(0, host);
  await once(server, 'listening');
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    server.close();
    await once(server, 'close');
  });
  return { port: (server.address() as { port: number }).port, accepted: () => accepted };
}

async function edgeTunnel(h: Harness): Promise<TestServer> {
  const { server } = await startTunnel(h, { agent: { identifiers: 'ipv4=127.0.0.9&host=edge-1' } });
  return server;
}

test('HTTP CONNECT egress: a host no agent serves and no edge node has is dialled directly; bytes round-trip; counted', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const { path, registry } = await startEgress(h, server, 'http-connect');
  const echo = await startEchoServer(h);
  const early = Buffer.from('sent with the CONNECT head;');
  const res = await connectVia(path, `127.0.0.1:${echo.port}`, { early });
  assert.equal(res.status, 200, res.head);
  const payload = randomBytes(256 * 1024);
  res.socket.write(payload);
  const back = await readExactly(res.socket, early.length + payload.length, res.rest);
  assert.ok(back.equals(Buffer.concat([early, payload])), 'byte-exact');
  res.socket.end();
  await once(res.socket, 'close');
  assert.deepEqual(await directDials(registry), { connected: 1 });
  assert.equal(server.tunnel.establishedCount(), 0, 'nothing went through the tunnel');
});

test('a graceful shutdown can wait for direct connections: open ones are counted until they close', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const { path, direct } = await startEgress(h, server, 'http-connect');
  assert.ok(direct !== undefined);
  assert.equal(await direct.whenIdle(0), true, 'idle before any dial');
  const echo = await startEchoServer(h);
  const res = await connectVia(path, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200, res.head);
  assert.equal(direct.openCount, 1);
  assert.equal(await direct.whenIdle(100), false, 'an open direct connection is waited for');
  const idle = direct.whenIdle(10_000);
  res.socket.end();
  assert.equal(await idle, true, 'idle once it closed');
  assert.equal(direct.openCount, 0);
});

test('gRPC egress: a direct dial answers DIAL_RSP, DATA echoes, CLOSE_REQ gets CLOSE_RSP', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const { path, registry } = await startEgress(h, server, 'grpc');
  const echo = await startEchoServer(h);
  const call = proxyCall(h, path);
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: 77n });
  const rsp = await call.next();
  assert.equal(rsp.type, 'DIAL_RSP');
  assert.equal(rsp.error, '');
  const connectID = rsp.connectID;
  assert.notEqual(connectID, 0n);
  const payload = randomBytes(200 * 1024);
  call.send({ type: 'DATA', connectID, error: '', data: payload });
  const received: Buffer[] = [];
  let got = 0;
  while (got < payload.length) {
    const p = await call.next();
    assert.equal(p.type, 'DATA');
    received.push(p.data);
    got += p.data.length;
  }
  assert.ok(Buffer.concat(received).equals(payload), 'byte-exact');
  call.send({ type: 'CLOSE_REQ', connectID });
  assert.deepEqual(await call.next(), { type: 'CLOSE_RSP', connectID, error: '' });
  call.end();
  assert.equal(await call.status, '0');
  assert.deepEqual(await directDials(registry), { connected: 1 });
});

test('an edge node with no agent, by name or address, keeps its 503 and is never dialled directly', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const connectEgress = await startEgress(h, server, 'http-connect');
  const grpcEgress = await startEgress(h, server, 'grpc', { registry: connectEgress.registry });
  const edge2 = await countingListener(h, '127.0.0.10');
  for (const target of [`127.0.0.10:${edge2.port}`, 'edge-2:10250']) {
    const res = await connectVia(connectEgress.path, target);
    assert.equal(res.status, 503, res.head);
    assert.match(res.head, /no agent serves/);
    res.socket.destroy();
    const call = proxyCall(h, grpcEgress.path);
    call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: target, random: 5n });
    const rsp = await call.next();
    assert.equal(rsp.type, 'DIAL_RSP');
    assert.match(rsp.error, /no agent serves/);
    assert.equal(await call.status, '0');
  }
  assert.equal(edge2.accepted(), 0);
  assert.deepEqual(await directDials(connectEgress.registry), {});
});

test('a direct dial that fails maps to 502 or DIAL_RSP naming "direct"', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const port = await closedPort();
  const connectEgress = await startEgress(h, server, 'http-connect');
  const grpcEgress = await startEgress(h, server, 'grpc', { registry: connectEgress.registry });
  const res = await connectVia(connectEgress.path, `127.0.0.1:${port}`);
  assert.equal(res.status, 502, res.head);
  assert.match(res.head, /direct dial .*ECONNREFUSED/);
  res.socket.destroy();
  const call = proxyCall(h, grpcEgress.path);
  call.send({ type: 'DIAL_REQ', protocol: 'tcp', address: `127.0.0.1:${port}`, random: 6n });
  const rsp = await call.next();
  assert.match(rsp.type === 'DIAL_RSP' ? rsp.error : '', /direct dial .*ECONNREFUSED/);
  assert.deepEqual(await directDials(connectEgress.registry), { YT_ERR_DIAL_FAILED: 2 });
});

test('a direct dial that does not connect within the dial timeout is a 504 naming "direct"', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const port = await startHangingListener(h);
  const { path, registry } = await startEgress(h, server, 'http-connect', { dialTimeoutMs: 300 });
  const started = performance.now();
  const res = await connectVia(path, `127.0.0.1:${port}`);
  assert.equal(res.status, 504, res.head);
  assert.match(res.head, /direct dial .* within 300 ms/);
  assert.ok(performance.now() - started < 3000);
  res.socket.destroy();
  assert.deepEqual(await directDials(registry), { YT_ERR_DIAL_TIMEOUT: 1 });
});

test('a client that half-closes during a direct dial still gets the answer to what it sent', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const { path } = await startEgress(h, server, 'http-connect');
  const target = await startTCPServer(h, (s) => {
    const got: Buffer[] = [];
    s.on('data', (c: Buffer) => got.push(c));
    s.on('end', () => s.end(`got ${Buffer.concat(got).toString()}`));
  });
  const client = connect(path);
  h.defer(() => client.destroy());
  client.end(`CONNECT 127.0.0.1:${target.port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nhello`);
  const answer = (await readAll(client)).toString('latin1');
  assert.equal(answer, 'HTTP/1.1 200 Connection Established\r\n\r\ngot hello');
});

test('IPv6: [::1] is dialled directly too', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const { path } = await startEgress(h, server, 'http-connect');
  const listener = createServer((s) => s.end('over ::1'));
  const sockets = new Set<Socket>();
  listener.on('connection', (s) => sockets.add(s));
  try {
    listener.listen(0, '::1');
    await once(listener, 'listening');
  } catch {
    t.skip('no ::1 on this host');
    return;
  }
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    listener.close();
    await once(listener, 'close');
  });
  const res = await connectVia(path, `[::1]:${(listener.address() as { port: number }).port}`);
  assert.equal(res.status, 200, res.head);
  assert.equal(Buffer.concat([res.rest, await readAll(res.socket)]).toString(), 'over ::1');
});

test('--egress-direct-dial=off, and local mode (no Nodes): everything goes into the tunnel, 503 as before', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const echo = await startEchoServer(h);
  for (const opts of [{ directDial: 'off' as const }, { clusterMode: false }]) {
    const { path, registry } = await startEgress(h, server, 'http-connect', opts);
    const res = await connectVia(path, `127.0.0.1:${echo.port}`);
    assert.equal(res.status, 503, `${JSON.stringify(opts)}: ${res.head}`);
    res.socket.destroy();
    assert.deepEqual(await directDials(registry), {});
  }
  assert.equal(echo.sockets.size, 0);
});

test('the proxier socket and the master ports never dial directly: a non-edge host there gets 503', async (t) => {
  const h = harness(t);
  const server = await edgeTunnel(h);
  const echo = await startEchoServer(h);
  const { proxierPath, registry } = await startEgress(h, server, 'http-connect');
  const res = await connectVia(proxierPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 503, res.head);
  res.socket.destroy();
  const { insecurePort } = await startMaster(h, server);
  const status = await new Promise<number>((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/healthz', headers: { Host: `127.0.0.1:${echo.port}` }, agent: false });
    req.once('response', (r) => {
      r.resume();
      resolve(r.statusCode ?? 0);
    });
    req.once('error', reject);
    req.end();
  });
  assert.equal(status, 503);
  assert.equal(echo.sockets.size, 0);
  assert.deepEqual(await directDials(registry), {});
});
