// The HTTP CONNECT proxier against a real server, a real agent over mutual
// TLS and real TCP targets on loopback: every answer is provoked for real.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { test } from 'node:test';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { DialLimit } from '../../pkg/agent/dial-limit.js';
import { harness } from '../support/harness.js';
import {
  closedPort,
  connectVia,
  readAll,
  readExactly,
  startEchoServer,
  startAgent,
  startHangingListener,
  startTCPServer,
  startTunnel,
  waitFor,
} from '../support/tunnel.js';

test('200 Connection Established comes only after the agent has connected to the target', async (t) => {
  const h = harness(t);
  let acceptedAt = 0;
  const target = await startTCPServer(h, (s) => {
    acceptedAt = performance.now();
    s.end('hello from the target');
  });
  const { server } = await startTunnel(h);
  const res = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  const answeredAt = performance.now();
  assert.equal(res.head, 'HTTP/1.1 200 Connection Established\r\n\r\n');
  assert.ok(acceptedAt > 0 && acceptedAt <= answeredAt, 'the target had accepted before the 200 arrived');
  const body = Buffer.concat([res.rest, await readAll(res.socket)]);
  assert.equal(body.toString(), 'hello from the target');
  await waitFor('tables to empty', () => server.tunnel.establishedCount() === 0);
});

test('503 when no agent serves the host, naming it; the server keeps serving', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h);

  const noAgent = await connectVia(server.udsPath, '10.255.0.1:10250');
  assert.equal(noAgent.status, 503);
  assert.match(noAgent.head, /Content-Type: text\/plain; charset=utf-8\r\n/);
  assert.match(noAgent.head, /Connection: close\r\n/);
  assert.match(noAgent.rest.toString(), /^no agent serves 10\.255\.0\.1: none of the 1 connected agents matches it/);
  assert.equal(noAgent.rest.toString().split('\n').length, 2, 'one line of text');

  const byHeader = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-9' } });
  assert.equal(byHeader.status, 503);
  assert.match(byHeader.rest.toString(), /no agent serves edge-9 \(X-Tunnel-Proxy-Host edge-9\)/);
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_NO_AGENT'), 2);
  assert.equal(server.log.find('CONNECT failed').length, 2, 'each failure is logged');

  const ok = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(ok.status, 200);
  ok.socket.destroy();
});

test("502 when the agent's dial is refused, with the agent's reason", async (t) => {
  const h = harness(t);
  const port = await closedPort();
  const { server } = await startTunnel(h);
  const res = await connectVia(server.udsPath, `127.0.0.1:${port}`);
  assert.equal(res.status, 502);
  assert.equal(res.rest.toString(), `agent edge-1 could not dial 127.0.0.1:${port}: dial tcp 127.0.0.1:${port}: connect: connection refused\n`);
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_DIAL_FAILED'), 1);
});

test("502 when the agent's allow-list denies the address, saying so", async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h, { agent: { allowList: AllowList.parse(`127.0.0.1:${echo.port + 1}`) } });
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 502);
  assert.match(res.rest.toString(), /^agent edge-1 refused to dial 127\.0\.0\.1:\d+: .*denied by policy/);
  assert.equal(echo.sockets.size, 0, 'the target was never dialled');
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_DIAL_DENIED'), 1);
});

test("504 when the agent does not answer within the server's dial timeout; the agent is told to stop", async (t) => {
  const h = harness(t);
  const port = await startHangingListener(h);
  const { server, agent } = await startTunnel(h, {
    server: { tunnel: { dialTimeoutMs: 300 } },
    agent: { dialTimeoutMs: 10_000 },
  });
  const started = performance.now();
  const res = await connectVia(server.udsPath, `127.0.0.1:${port}`);
  assert.equal(res.status, 504);
  assert.ok(performance.now() - started >= 290, 'not before the timeout');
  assert.equal(res.rest.toString(), `agent edge-1 did not answer the dial to 127.0.0.1:${port} within 300 ms\n`);
  // DIAL_CLS reached the agent, which abandoned its dial.
  await waitFor('the agent to cancel its dial', () => agent.clients.pendingDialCount === 0, 2000);
  assert.equal(server.tunnel.pendingDialCount, 0);
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_DIAL_TIMEOUT'), 1);
});

test("504 when the agent's own dial times out", async (t) => {
  const h = harness(t);
  const port = await startHangingListener(h);
  const { server } = await startTunnel(h, { agent: { dialTimeoutMs: 200 } });
  const res = await connectVia(server.udsPath, `127.0.0.1:${port}`);
  assert.equal(res.status, 504);
  assert.match(res.rest.toString(), /could not dial 127\.0\.0\.1:\d+: dial tcp 127\.0\.0\.1:\d+: i\/o timeout/);
});

test('a client that gives up while the dial is pending sends DIAL_CLS; nothing is left behind', async (t) => {
  const h = harness(t);
  const port = await startHangingListener(h);
  const { server, agent } = await startTunnel(h, { agent: { dialTimeoutMs: 10_000 } });
  const { connect } = await import('node:net');
  const socket = connect(server.udsPath);
  await once(socket, 'connect');
  socket.write(`CONNECT 127.0.0.1:${port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  await waitFor('the dial to reach the agent', () => agent.clients.pendingDialCount === 1);
  assert.equal(server.tunnel.pendingDialCount, 1);
  socket.destroy();
  await waitFor('the server to drop the dial', () => server.tunnel.pendingDialCount === 0, 1000);
  await waitFor('the agent to cancel its dial (DIAL_CLS)', () => agent.clients.pendingDialCount === 0, 1000);
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_DIAL_CANCELLED'), 1);
});

test('405 for other methods, 400 for malformed requests and for heads over 64 KiB', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h);
  const get = await connectVia(server.udsPath, '', { raw: 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' });
  assert.equal(get.status, 405);
  assert.match(get.head, /\r\nAllow: CONNECT\r\n/);

  for (const raw of ['garbage\r\n\r\n', 'CONNECT 127.0.0.1:1 HTTP/2.0\r\n\r\n', 'CONNECT  HTTP/1.1\r\n\r\n', 'CONNECT x:1 HTTP/1.1\r\nbad header\r\n\r\n']) {
    const res = await connectVia(server.udsPath, '', { raw });
    assert.equal(res.status, 400, raw);
  }
  const noPort = await connectVia(server.udsPath, 'edge-1');
  assert.equal(noPort.status, 400);
  assert.match(noPort.rest.toString(), /is not host:port/);

  const huge = await connectVia(server.udsPath, '', {
    raw: `CONNECT 127.0.0.1:${echo.port} HTTP/1.1\r\nX-Big: ${'a'.repeat(70 * 1024)}\r\n\r\n`,
  });
  assert.equal(huge.status, 400);
  assert.match(huge.rest.toString(), /request head is larger than 65536 bytes/);

  const ok = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(ok.status, 200, 'still serving after bad input');
  ok.socket.destroy();
});

test('bytes pipelined right after the CONNECT head are not lost', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h);
  const early = Buffer.from('sent together with the CONNECT request');
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { early });
  assert.equal(res.status, 200);
  assert.deepEqual(await readExactly(res.socket, early.length, res.rest), early);
  res.socket.destroy();
});

test('client close sends CLOSE_REQ: the target connection closes and the tables empty', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server, agent } = await startTunnel(h);
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  await waitFor('the target to see the connection', () => echo.sockets.size === 1);
  assert.equal(server.tunnel.establishedCount(), 1);
  res.socket.end();
  await waitFor('the target connection to close', () => echo.sockets.size === 0, 1000);
  await waitFor('the agent to forget it', () => agent.clients.connCount === 0, 1000);
  await waitFor('the server to forget it', () => server.tunnel.establishedCount() === 0, 1000);
  res.socket.resume();
  await waitFor('the proxier to close the client connection', () => res.socket.destroyed, 1000);
});

test('target close ends the client connection after its last bytes', async (t) => {
  const h = harness(t);
  const payload = Buffer.alloc(3 * 1024 * 1024, 7);
  const target = await startTCPServer(h, (s) => s.end(payload));
  const { server } = await startTunnel(h);
  const res = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  const got = Buffer.concat([res.rest, await readAll(res.socket)]);
  assert.equal(got.length, payload.length);
  assert.ok(got.equals(payload));
  await waitFor('the server to forget it', () => server.tunnel.establishedCount() === 0, 1000);
});

test('the agent runs at most --max-concurrent-dials dials; one beyond is refused at once with a reason, and counted', async (t) => {
  const h = harness(t);
  const hanging = await startHangingListener(h);
  const target = await startTCPServer(h, (s) => s.end('hello'));
  const dialLimit = new DialLimit(1);
  const { server, agent } = await startTunnel(h, {
    server: { tunnel: { dialTimeoutMs: 10_000 } },
    agent: { dialTimeoutMs: 10_000, connection: { dialLimit } },
  });
  const pending = connectVia(server.udsPath, `127.0.0.1:${hanging}`);
  await waitFor('the first dial to run on the agent', () => dialLimit.inFlight === 1);
  const refused = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  assert.equal(refused.status, 502);
  assert.match(refused.rest.toString(), /this agent already runs 1 dials \(--max-concurrent-dials\); try again later/);
  assert.equal(dialLimit.refused, 1);
  // The pending dial ends (the client goes away); its slot is free again.
  const first = await Promise.race([pending, new Promise<undefined>((r) => setImmediate(() => r(undefined)))]);
  assert.equal(first, undefined, 'the first dial is still pending');
  await server.proxier.close();
  await waitFor('the slot freed', () => dialLimit.inFlight === 0 && agent.clients.pendingDialCount === 0, 15_000);
  await pending.catch(() => undefined);
});

test('one agent has at most --max-pending-dials-per-agent dials pending; one more gets 503 at once with the reason, counted; other dials go on', async (t) => {
  const h = harness(t);
  const hanging = await startHangingListener(h);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h, {
    server: { tunnel: { dialTimeoutMs: 20_000, maxPendingDialsPerAgent: 2 } },
    agent: { dialTimeoutMs: 20_000 },
  });
  startAgent(h, server.agentAddress, { nodeName: 'edge-2', identifiers: 'ipv4=127.0.0.2&host=edge-2' });
  await waitFor('edge-2', () => server.tunnel.registry.agentCount === 2);
  const held = [connectVia(server.udsPath, `127.0.0.1:${hanging}`), connectVia(server.udsPath, `127.0.0.1:${hanging}`)];
  await waitFor('two dials pending on edge-1', () => server.tunnel.pendingDialCount === 2);

  const refused = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  const reason = 'agent edge-1 already has 2 dials waiting for an answer (limit 2, the server flag --max-pending-dials-per-agent); retry later';
  assert.equal(refused.status, 503);
  assert.equal(refused.head.split('\r\n')[0], `HTTP/1.1 503 Service Unavailable: ${reason}`);
  assert.equal(refused.rest.toString(), `${reason}\n`);
  assert.equal(await server.tunnel.metrics.failures('YT_ERR_TOO_MANY_DIALS'), 1);
  assert.equal(server.tunnel.pendingDialCount, 2, 'the dials already pending are not touched');

  // Another agent's dials are not held back.
  const other = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-2' } });
  assert.equal(other.status, 200);
  other.socket.write('ok');
  assert.equal((await readExactly(other.socket, 2, other.rest)).toString(), 'ok');
  other.socket.destroy();

  // Once edge-1's dials end, it takes new ones again.
  await server.proxier.close();
  await Promise.all(held.map((p) => p.catch(() => undefined)));
  await waitFor('the held dials gone', () => server.tunnel.pendingDialCount === 0);
  const again = await server.tunnel.dial(`127.0.0.1:${echo.port}`);
  again.destroy();
});
