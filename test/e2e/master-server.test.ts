// The master ports end to end: a caller with kube-apiserver's identity → the
// secure port → middleware → a tunnelled connection → agent → TLS to a
// stand-in kubelet with the proxy-client identity.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readdirSync } from 'node:fs';
import { createServer as createHTTPServer, request as httpRequest, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { Agent } from 'node:https';
import { Registry } from 'prom-client';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { harness } from '../support/harness.js';
import { apiserverClientCert, callMaster, startKubelet, startMaster } from '../support/master.js';
import { testPKI } from '../support/pki.js';
import { closedPort, startAgent, startHangingListener, startServer, startTCPServer, startTunnel, waitFor } from '../support/tunnel.js';

test('healthz, metrics and stats through the secure port; the kubelet sees the proxy-client identity', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const host = `127.0.0.1:${kubelet.port}`;
  const health = await callMaster(securePort, '/healthz', host);
  assert.equal(health.status, 200);
  assert.equal(health.body.toString(), 'ok');
  const metrics = await callMaster(securePort, '/metrics', host);
  assert.equal(metrics.status, 200);
  assert.match(metrics.body.toString(), /^# HELP /m);
  const stats = await callMaster(securePort, '/stats/summary', host);
  assert.equal(stats.status, 200);
  assert.equal((JSON.parse(stats.body.toString()) as { node: { nodeName: string } }).node.nodeName, 'edge-1');
  const seen = kubelet.requests.map((r) => r.clientSubject);
  assert.deepEqual(seen.at(-1), { commonName: 'tunnel-proxy-client', organizations: ['openyurt:yurttunnel'] });
  assert.equal(
    kubelet.requests.some((r) => r.headers.some(([name]) => /^x-tunnel-proxy-/i.test(name))),
    false,
    'routing headers are not passed on',
  );
});

test("a Host that is a node name goes to that node's agent; an unknown name gets 400 naming it", async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h, 'edge-1');
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const byName = await callMaster(securePort, '/healthz', `edge-1:${kubelet.port}`);
  assert.equal(byName.status, 200);
  const unknown = await callMaster(securePort, '/healthz', `edge-9:${kubelet.port}`);
  assert.equal(unknown.status, 400);
  assert.equal(unknown.body.toString(), 'node "edge-9" is not known to the tunnel server: no connected agent advertises it\n');
});

test('the insecure port carries plain HTTP to plain HTTP targets, and X-Tunnel-Proxy-Dest routes direct callers', async (t) => {
  const h = harness(t);
  const target = await startTCPServer(h, (s) => {
    s.once('data', () => s.end('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nplain'));
  });
  const { server } = await startTunnel(h);
  const { insecurePort } = await startMaster(h, server);
  for (const headers of [{ Host: `127.0.0.1:${target.port}` }, { Host: `127.0.0.1:1`, 'X-Tunnel-Proxy-Dest': `127.0.0.1:${target.port}` }]) {
    const req = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/metrics', headers, agent: false });
    req.end();
    const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    assert.equal(res.statusCode, 200);
    assert.equal(Buffer.concat(chunks).toString(), 'plain');
  }
});

test('the secure port refuses callers without a client certificate from its CA', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const host = `127.0.0.1:${kubelet.port}`;
  await assert.rejects(callMaster(securePort, '/healthz', host, { cert: null }), /certificate required|socket hang up|ECONNRESET/);
  await assert.rejects(callMaster(securePort, '/healthz', host, { cert: testPKI().foreign.client }), /socket hang up|ECONNRESET|unknown ca|certificate/);
  assert.equal(kubelet.requests.length, 0, 'nothing reached the kubelet');
  assert.ok(server.log.find('caller refused on the secure master port').length >= 2);
  // HTTP/1.1 only: a caller offering only h2 gets no protocol it can use.
  const pki = testPKI();
  const h2 = tlsConnect({ host: '127.0.0.1', port: securePort, ca: pki.ca.cert, ...apiserverClientCert(), servername: '', ALPNProtocols: ['h2'] });
  const [err] = (await once(h2, 'error').catch((e: unknown) => [e])) as [Error];
  assert.match(err.message, /no application protocol/);
  h2.destroy();
});

test('errors carry a status the caller can act on and one line of reason', async (t) => {
  const h = harness(t);
  const hanging = await startHangingListener(h);
  const refused = await closedPort();
  const notTLS = await startTCPServer(h, (s) => s.end('this is not TLS\n'));
  const { server } = await startTunnel(h, { server: { tunnel: { dialTimeoutMs: 300 } }, agent: { dialTimeoutMs: 10_000 } });
  const { securePort } = await startMaster(h, server);

  const noAgent = await callMaster(securePort, '/healthz', '10.255.0.9:10250');
  assert.equal(noAgent.status, 503);
  assert.match(noAgent.body.toString(), /^no agent serves 10\.255\.0\.9: /);

  const dialRefused = await callMaster(securePort, '/healthz', `127.0.0.1:${refused}`);
  assert.equal(dialRefused.status, 502);
  assert.match(dialRefused.body.toString(), /^agent edge-1 could not dial 127\.0\.0\.1:\d+: dial tcp 127\.0\.0\.1:\d+: connect: connection refused\n$/);

  const tlsFailed = await callMaster(securePort, '/healthz', `edge-1:${notTLS.port}`);
  assert.equal(tlsFailed.status, 502);
  assert.match(tlsFailed.body.toString(), new RegExp(`^TLS handshake with the kubelet of node edge-1 at 127\\.0\\.0\\.1:${notTLS.port} failed: `));

  const timedOut = await callMaster(securePort, '/healthz', `127.0.0.1:${hanging}`);
  assert.equal(timedOut.status, 504);
  assert.match(timedOut.body.toString(), /did not answer the dial to 127\.0\.0\.1:\d+ within 300 ms/);

  for (const r of [noAgent, dialRefused, tlsFailed, timedOut]) {
    assert.equal(r.body.toString().split('\n').length, 2, 'one line');
    assert.equal(r.headers['content-type'], 'text/plain; charset=utf-8');
  }
});

test('with --kubelet-ca-file the kubelet certificate is verified; without it the server says once per node that it cannot', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1' });
  await waitFor('agent', () => server.tunnel.registry.agentCount === 1);
  const unverified = await startMaster(h, server);
  for (let i = 0; i < 3; i++)
    assert.equal((await callMaster(unverified.securePort, '/healthz', `edge-1:${kubelet.port}`, { agent: new Agent({ keepAlive: false }) })).status, 200);
  assert.equal(server.log.find("cannot verify this kubelet's serving certificate").length, 1);

  const verified = await startMaster(h, server, { kubeletCA: testPKI().ca.cert });
  assert.equal((await callMaster(verified.securePort, '/healthz', `edge-1:${kubelet.port}`)).status, 200);
  const wrongCA = await startMaster(h, server, { kubeletCA: testPKI().foreign.ca.cert });
  const r = await callMaster(wrongCA.securePort, '/healthz', `edge-1:${kubelet.port}`);
  assert.equal(r.status, 502);
  assert.match(r.body.toString(), /^TLS handshake with the kubelet of node edge-1 at 127\.0\.0\.1:\d+ failed: .*(self-signed|unable to verify|issuer)/);
});

test('requests in flight are counted by verb and a bounded path class, never the full path', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const registry = new Registry();
  const { securePort } = await startMaster(h, server, { metricsRegistry: registry });
  const inFlight = async (): Promise<Array<{ labels: object; value: number }>> =>
    (await registry.getSingleMetric('yurttunnel_server_in_proxy_requests')!.get()).values.filter((v) => v.value !== 0);
  const pki = testPKI();
  const { request } = await import('node:https');
  const req = request({
    host: '127.0.0.1',
    port: securePort,
    path: '/containerLogs/default/some-pod-with-a-long-name/app?follow=true',
    headers: { Host: `127.0.0.1:${kubelet.port}` },
    ca: pki.ca.cert,
    ...apiserverClientCert(),
    servername: '',
    agent: false,
  });
  req.end();
  const [res] = (await once(req, 'response')) as [import('node:http').IncomingMessage];
  res.resume();
  assert.deepEqual(await inFlight(), [{ labels: { verb: 'get', path: 'logs' }, value: 1 }]);
  res.destroy();
  await waitFor('the request to leave the in-flight gauge', async () => (await inFlight()).length === 0, 2000);
  const total = await registry.getSingleMetric('yurttunnel_server_proxy_requests_total')!.get();
  assert.deepEqual(
    total.values.map((v) => [v.labels, v.value]),
    [[{ verb: 'get', path: 'logs' }, 1]],
  );
});

/** Open descriptors of this process (callers and server are both in it). */
function descriptorCount(): number {
  return readdirSync('/proc/self/fd').length;
}

test('200 silent TCP callers on the secure port are closed at the TLS handshake timeout; the descriptors come back', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const { master, securePort } = await startMaster(h, server, { tlsHandshakeTimeoutMs: 500 });
  const baseline = descriptorCount();
  const started = performance.now();
  const callers = await Promise.all(
    Array.from({ length: 200 }, async () => {
      const s = connect(securePort, '127.0.0.1');
      s.on('error', () => {});
      h.defer(() => s.destroy());
      await once(s, 'connect');
      return s;
    }),
  );
  // The server closes each one; a caller sees it as its socket closing (the issue: they stayed in CLOSE-WAIT).
  let closed = 0;
  for (const s of callers) {
    s.once('close', () => closed++);
    s.resume();
  }
  await waitFor('the server to close every silent caller', () => closed === 200, 15_000);
  assert.ok(performance.now() - started >= 500, 'not before the handshake timeout');
  assert.equal(master.refusedCallers('secure').tls_handshake_timeout, 200);
  await waitFor('the descriptor count back at its baseline', () => descriptorCount() <= baseline, 5000);
  assert.ok(server.log.find('did not finish its TLS handshake in time').length <= 5, 'a few lines, not one per caller');
});

test('2,000 refused callers on the secure port write a few log lines and a summary; the counter counts every one', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const { master, securePort } = await startMaster(h, server);
  // Plain HTTP to the TLS port: each is refused in its handshake, at once.
  for (let i = 0; i < 2000; i += 100) {
    await Promise.all(
      Array.from({ length: 100 }, async () => {
        const s = connect(securePort, '127.0.0.1');
        s.on('error', () => {});
        await once(s, 'connect');
        s.end('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
        s.resume();
        await once(s, 'close');
      }),
    );
  }
  await waitFor('every refusal counted', () => master.refusedCallers('secure').tls_error === 2000);
  await master.close(); // writes the pending summary
  const lines = server.log.find('caller refused on the secure master port');
  assert.ok(lines.length <= 20, `${lines.length} lines for 2,000 refusals`);
  const summaries = lines.filter((r) => typeof r.fields.leftOut === 'number');
  assert.ok(summaries.length >= 1, 'a summary says how many were left out');
  const leftOut = summaries.reduce((n, r) => n + (r.fields.leftOut as number), 0);
  assert.equal(lines.length - summaries.length + leftOut, 2000, 'every refusal is either written or counted in a summary');
});

test('a caller that goes away while its dial is pending cancels the dial (DIAL_CLS), for a request and for an upgrade', async (t) => {
  const h = harness(t);
  const hanging = await startHangingListener(h);
  const { server } = await startTunnel(h, { server: { tunnel: { dialTimeoutMs: 60_000 } }, agent: { dialTimeoutMs: 60_000 } });
  const { insecurePort } = await startMaster(h, server);
  const host = `127.0.0.1:${hanging}`;

  const req = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/healthz', headers: { Host: host }, agent: false });
  req.on('error', () => {});
  req.end();
  await waitFor('the dial to be pending', () => server.tunnel.pendingDialCount === 1);
  req.destroy();
  await waitFor('the dial to be cancelled', () => server.tunnel.pendingDialCount === 0);

  const upgrade = connect(insecurePort, '127.0.0.1');
  upgrade.on('error', () => {});
  upgrade.write(`GET /exec/default/p1/c1?command=cat HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`);
  await waitFor('the dial to be pending', () => server.tunnel.pendingDialCount === 1);
  upgrade.destroy();
  await waitFor('the dial to be cancelled', () => server.tunnel.pendingDialCount === 0);

  const cancelled = server.log.find('dial failed').filter((r) => r.fields.reason === 'YT_ERR_DIAL_CANCELLED');
  assert.equal(cancelled.length, 2, JSON.stringify(server.log.find('dial failed')));
});

test('the plain port pools tunnelled connections: requests reuse one, and one its target closed leaves the pool', async (t) => {
  const h = harness(t);
  const targetSockets: Socket[] = [];
  const target = createHTTPServer((_req, res) => res.end('pooled'));
  target.on('connection', (s: Socket) => targetSockets.push(s));
  target.listen(0, '127.0.0.1');
  await once(target, 'listening');
  h.defer(() => {
    target.closeAllConnections();
    return new Promise((resolve) => target.close(resolve));
  });
  const { server } = await startTunnel(h);
  const { insecurePort } = await startMaster(h, server);
  const host = `127.0.0.1:${(target.address() as AddressInfo).port}`;
  const get = async (): Promise<string> => {
    const req = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/', headers: { Host: host }, agent: false });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    const chunks: Buffer[] = [];
    for await (const c of res) chunks.push(c as Buffer);
    return Buffer.concat(chunks).toString();
  };
  for (let i = 0; i < 3; i++) assert.equal(await get(), 'pooled');
  assert.equal(targetSockets.length, 1, 'one tunnelled connection carried all three');
  // The target closes its idle keep-alive connection: the pooled one closes too, and the next request dials anew.
  target.closeIdleConnections();
  await waitFor('the pooled connection to close', () => server.tunnel.establishedCount() === 0);
  assert.equal(await get(), 'pooled');
  assert.equal(targetSockets.length, 2);
});
