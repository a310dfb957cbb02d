// Every kind of kubelet traffic through the secure master port: streams,
// large bodies, upgrades (WebSocket and SPDY), many requests at once, pooled
// keep-alive connections, localhost ports.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent, request as httpsRequest } from 'node:https';
import { test } from 'node:test';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { harness, type Harness } from '../support/harness.js';
import { apiserverClientCert, callMaster, startKubelet, startMaster } from '../support/master.js';
import { testPKI } from '../support/pki.js';
import { CHANNEL, forwardPatternEcho, PatternVerifier, patternView, upgradeToChannelWebSocket, upgradeToSpdy } from '../support/standin-kubelet/index.js';
import { startAgent, startEchoServer, startServer, startTCPServer, startTunnel, waitFor } from '../support/tunnel.js';

const MiB = 1024 * 1024;

/** A TLS connection to the secure master port as kube-apiserver opens one for an upgrade. */
async function dialMaster(h: Harness, port: number): Promise<TLSSocket> {
  const pki = testPKI();
  const socket = tlsConnect({ host: '127.0.0.1', port, ca: pki.ca.cert, ...apiserverClientCert(), servername: '', ALPNProtocols: ['http/1.1'] });
  h.defer(() => socket.destroy());
  await once(socket, 'secureConnect');
  return socket;
}

/** A streaming GET to the secure master port; resolves with the response. */
async function streamFromMaster(h: Harness, port: number, path: string, host: string): Promise<IncomingMessage> {
  const pki = testPKI();
  const req = httpsRequest({ host: '127.0.0.1', port, path, headers: { Host: host }, ca: pki.ca.cert, ...apiserverClientCert(), servername: '', agent: false });
  h.defer(() => req.destroy());
  req.end();
  const [res] = (await once(req, 'response')) as [IncomingMessage];
  return res;
}

test("logs follow: each line arrives as it is written, and closing the caller stops the kubelet's stream", async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h, 'edge-1', { followIntervalMs: 50 });
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const res = await streamFromMaster(h, securePort, '/containerLogs/default/p1/c1?follow=true', `127.0.0.1:${kubelet.port}`);
  assert.equal(res.statusCode, 200);
  const arrivals: number[] = [];
  let text = '';
  res.on('data', (chunk: Buffer) => {
    text += chunk.toString();
    arrivals.push(performance.now());
  });
  await waitFor('five follow lines', () => (text.match(/follow \d+\n/g) ?? []).length >= 5, 5000);
  const stream = kubelet.followStreams[0]!;
  // The first follow line (after the log's existing lines) was written at lineTimes[0].
  const firstFollow = stream.lineTimes[0]!;
  const firstArrival = arrivals.find((a) => a >= firstFollow)!;
  assert.ok(firstArrival - firstFollow < 100, `first line took ${(firstArrival - firstFollow).toFixed(1)} ms`);
  assert.ok(arrivals.length >= 5, 'each line came as its own chunk, not batched');

  const closedAt = performance.now();
  res.destroy();
  await waitFor('the kubelet to end the follow stream', () => stream.endedAt !== null, 1000);
  assert.ok(stream.endedAt! - closedAt < 1000);
  assert.equal(stream.endReason, 'client-gone');
  await waitFor('the tunnel connection to close', () => server.tunnel.establishedCount() === 0, 1000);
});

test('a 100 MiB response arrives byte-exact', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const size = 100 * MiB;
  const res = await streamFromMaster(h, securePort, `/bytes?n=${size}`, `127.0.0.1:${kubelet.port}`);
  assert.equal(res.statusCode, 200);
  const verifier = new PatternVerifier();
  for await (const chunk of res) verifier.update(chunk as Buffer);
  assert.equal(verifier.received, size);
});

test('WebSocket exec (v5.channel.k8s.io) echoes 10 MiB both ways byte-exact, then Success and close', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const socket = await dialMaster(h, securePort);
  const { client, head } = await upgradeToChannelWebSocket({
    socket,
    target: '/exec/default/p1/c1?command=cat&error=1&input=1&output=1',
    protocols: ['v5.channel.k8s.io'],
    host: `127.0.0.1:${kubelet.port}`,
  });
  assert.equal(head.status, 101);
  const total = 10 * MiB;
  const stdout = new PatternVerifier();
  const errorChannel: Buffer[] = [];
  client.on('data', (channel: number, piece: Buffer) => {
    if (channel === CHANNEL.stdout) stdout.update(piece);
    else if (channel === CHANNEL.error) errorChannel.push(piece);
  });
  const closeFrame = once(client, 'closeFrame');
  for (let off = 0; off < total; off += 32 * 1024) {
    if (!client.write(CHANNEL.stdin, patternView(off, Math.min(32 * 1024, total - off)))) await client.drained();
  }
  client.closeChannel(CHANNEL.stdin);
  const [frame] = (await closeFrame) as [{ code: number }];
  assert.equal(frame.code, 1000);
  assert.equal(stdout.received, total);
  assert.deepEqual(JSON.parse(Buffer.concat(errorChannel).toString()), { metadata: {}, status: 'Success' });
  await waitFor('the connection to close', () => socket.destroyed || socket.readableEnded, 2000);
});

test("a refused upgrade is passed back as it came; kubectl's SPDY port-forward then works byte-exact", async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const kubelet = await startKubelet(h, 'edge-1', { portForwardTargets: { 80: { host: '127.0.0.1', port: echo.port } } });
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const host = `127.0.0.1:${kubelet.port}`;

  // kubectl v1.32 first tries WebSocket; a v1.24-like kubelet answers 403, which must reach kubectl unchanged.
  const first = await dialMaster(h, securePort);
  await assert.rejects(upgradeToChannelWebSocket({ socket: first, target: '/portForward/default/p1', protocols: ['SPDY/3.1+portforward.k8s.io'], host }), {
    status: 403,
  });

  const socket = await dialMaster(h, securePort);
  const { session, protocol } = await upgradeToSpdy({ socket, target: '/portForward/default/p1', protocols: ['portforward.k8s.io'], host });
  assert.equal(protocol, 'portforward.k8s.io');
  const results = await Promise.all([forwardPatternEcho(session, 80, 0, 4 * MiB), forwardPatternEcho(session, 80, 1, 3 * MiB + 17)]);
  assert.deepEqual(results, [
    { echoed: 4 * MiB, errorText: '' },
    { echoed: 3 * MiB + 17, errorText: '' },
  ]);
  session.close();
  await once(session, 'close');
});

test('200 concurrent requests across 3 agents all reach the right kubelet', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const nodes = ['edge-a', 'edge-b', 'edge-c'];
  const kubelets = await Promise.all(nodes.map((n) => startKubelet(h, n)));
  for (const n of nodes) startAgent(h, server.agentAddress, { nodeName: n, identifiers: `ipv4=127.0.0.1&host=${n}` });
  await waitFor('three agents', () => server.tunnel.registry.agentCount === 3);
  const { securePort } = await startMaster(h, server);
  const agent = new Agent({ keepAlive: true, maxSockets: 30 });
  h.defer(() => agent.destroy());
  const results = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const node = nodes[i % 3]!;
      const r = await callMaster(securePort, '/stats/summary', `${node}:${kubelets[i % 3]!.port}`, { agent });
      return r.status === 200 && (JSON.parse(r.body.toString()) as { node: { nodeName: string } }).node.nodeName === node;
    }),
  );
  assert.equal(results.filter((ok) => !ok).length, 0);
  for (const k of kubelets) assert.ok(k.requests.length >= 66, `${k.requests.length} requests`);
});

test('pooled keep-alive: 50 requests on one caller connection all work, over reused tunnels', async (t) => {
  const h = harness(t);
  const kubelet = await startKubelet(h);
  const { server } = await startTunnel(h);
  const { securePort } = await startMaster(h, server);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  h.defer(() => agent.destroy());
  const sockets = new Set<unknown>();
  for (let i = 0; i < 50; i++) {
    const path = i % 2 === 0 ? '/healthz' : '/containerLogs/default/p1/c1?tailLines=2';
    const r = await callMaster(securePort, path, `127.0.0.1:${kubelet.port}`, { agent });
    assert.equal(r.status, 200, `request ${i}`);
    for (const list of Object.values(agent.sockets).concat(Object.values(agent.freeSockets))) for (const s of list ?? []) sockets.add(s);
  }
  assert.equal(sockets.size, 1, 'one caller connection');
  const kubeletConnections = new Set(kubelet.requests.map((r) => r.connection));
  assert.equal(kubeletConnections.size, 1, 'and one tunnelled connection to the kubelet, reused');
});

test("localhost-proxy-ports reach the node's loopback; an address no agent has gets 400", async (t) => {
  const h = harness(t);
  const seen: string[] = [];
  const meta = await startTCPServer(h, (s) => {
    seen.push(s.localAddress ?? '');
    s.once('data', () => s.end('HTTP/1.1 200 OK\r\nContent-Length: 11\r\nConnection: close\r\n\r\nagent meta\n'));
  });
  const { server } = await startTunnel(h, {
    agent: { nodeName: 'edge-1', identifiers: 'ipv4=127.0.0.2&host=edge-1', allowList: AllowList.parse('127.0.0.0/8') },
  });
  const { insecurePort } = await startMaster(h, server, { localhostPorts: [meta.port] });
  const get = async (host: string): Promise<{ status: number; body: string }> => {
    const req = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/metrics', headers: { Host: host }, agent: false });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const c of res) body += String(c);
    return { status: res.statusCode ?? 0, body };
  };
  const ok = await get(`127.0.0.2:${meta.port}`);
  assert.equal(ok.status, 200);
  assert.equal(ok.body, 'agent meta\n');
  assert.deepEqual(seen, ['127.0.0.1'], 'dialled on the loopback, not the node address');
  const unknown = await get(`127.0.0.3:${meta.port}`);
  assert.equal(unknown.status, 400);
  assert.match(unknown.body, /^no node has address 127\.0\.0\.3/);
});
