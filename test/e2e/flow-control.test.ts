// Per-connection flow control (proto/yurttunnel_ext.proto) between our server
// and agent, and its absence towards upstream-style peers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CONN_WINDOW_HEADER, DEFAULT_CONN_WINDOW } from '../../pkg/protocol/flow-control.js';
import { harness } from '../support/harness.js';
import { run } from '../support/netns/index.js';
import { testPKI } from '../support/pki.js';
import { startSlowRelay } from '../support/slow-relay.js';
import {
  connectVia,
  readExactly,
  startAgent,
  startEchoServer,
  startFirehose,
  startServer,
  startTCPServer,
  startTunnel,
  waitFor,
  waitForSteady,
} from '../support/tunnel.js';
import { scriptedAgent, scriptedServer, type UpstreamPacket } from '../support/upstream.js';

test('a reader that stops does not stall the other connections of its agent', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  let streamed = 0;
  const chunk = Buffer.alloc(64 * 1024, 3);
  const firehose = await startTCPServer(h, (s) => {
    const pump = (): void => {
      while (s.writable && s.write(chunk)) streamed += chunk.length;
    };
    s.on('drain', pump);
    pump();
  });
  const { server } = await startTunnel(h);
  assert.equal(server.log.find('agent connected')[0]!.fields.flowControl, true);

  // A connection whose client never reads.
  const stalled = await connectVia(server.udsPath, `127.0.0.1:${firehose.port}`);
  assert.equal(stalled.status, 200);
  const stalledAt = await waitForSteady('the stalled firehose', () => streamed);

  // Meanwhile new connections open and answer at once, many times over.
  const started = performance.now();
  for (let i = 0; i < 20; i++) {
    const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
    assert.equal(res.status, 200);
    const msg = Buffer.from(`round ${i}`);
    res.socket.write(msg);
    assert.deepEqual(await readExactly(res.socket, msg.length, res.rest), msg);
    res.socket.destroy();
  }
  assert.ok(performance.now() - started < 5000, 'the other connections were not held up');
  // The stalled one stayed bounded while those twenty went through: its window and socket buffers, nothing more.
  assert.ok(streamed - stalledAt < 4 * 1024 * 1024, `the firehose kept going: ${streamed - stalledAt} more bytes`);
  // And it resumes when read.
  await readExactly(stalled.socket, streamed + 1024 * 1024, stalled.rest);
  stalled.socket.destroy();
});

test('an upstream-style agent that does not announce a window gets no flow control', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const pki = testPKI();
  const agent = scriptedAgent(h, server.agentAddress, {
    metadata: [
      ['agentid', 'go-agent'],
      ['agentidentifiers', 'host=go-agent'],
    ],
    tls: { ca: pki.ca.cert, ...pki.agent('go-agent') },
  });
  const md = await agent.headers;
  assert.deepEqual(md.get(CONN_WINDOW_HEADER), []);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  assert.equal(server.tunnel.registry.all()[0]!.flow, undefined);
  // A connection through it: the server sends DATA, never WINDOW_UPDATE.
  const dialing = server.tunnel.dial('127.0.0.1:9', { proxyHost: 'go-agent' });
  const req = await agent.next();
  agent.call.write({ type: 'DIAL_RSP', dialResponse: { error: '', connectID: '1', random: req.dialRequest!.random } });
  const conn = await dialing;
  conn.resume();
  for (let i = 0; i < 40; i++) {
    agent.call.write({ type: 'DATA', data: { connectID: '1', error: '', data: Buffer.alloc(32 * 1024, i) } });
  }
  conn.write('hello');
  const next = await agent.next();
  assert.equal(next.type, 'DATA', 'no WINDOW_UPDATE precedes the DATA');
  conn.destroy();
});

test('the agent announces its window and uses none when the server does not answer with one', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const echo = await startEchoServer(h);
  const upstream = await scriptedServer(h, { serverID: 'go-like', serverCount: 1, tls: { ca: pki.ca.cert, ...pki.server } });
  startAgent(h, `127.0.0.1:${upstream.port}`, { nodeName: 'edge-1', connection: { serverName: 'localhost' } });
  const call = await upstream.nextCall();
  assert.deepEqual(call.metadata.get(CONN_WINDOW_HEADER), [String(DEFAULT_CONN_WINDOW)]);
  const types: string[] = [];
  let echoed = 0;
  call.on('data', (p: UpstreamPacket) => {
    types.push(p.type);
    echoed += p.data?.data.length ?? 0;
  });
  call.write({ type: 'DIAL_REQ', dialRequest: { protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: '1' } });
  await waitFor('DIAL_RSP', () => types.includes('DIAL_RSP'));
  for (let i = 0; i < 64; i++) call.write({ type: 'DATA', data: { connectID: '1', error: '', data: Buffer.alloc(16 * 1024, i) } });
  // A WINDOW_UPDATE for what the agent consumed would come on the stream before the echo of those bytes;
  // the upstream .proto does not know it, so it would show as its number (100).
  await waitFor('every byte echoed', () => echoed === 64 * 16 * 1024, 5000);
  assert.deepEqual([...new Set(types)].sort(), ['DATA', 'DIAL_RSP'], `packets from the agent: ${types.join(' ')}`);
});

test('over a slow edge uplink a bulk flow keeps little in flight: its window narrows to the link instead of queueing seconds of data in front of the node', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  // 256 KiB/s from the agent: a widened 4 MiB window would be 16 s of queue in front of every other connection.
  const uplink = await startSlowRelay(h, Number(server.agentAddress.split(':')[1]), 256 * 1024);
  startAgent(h, `127.0.0.1:${uplink.port}`, { nodeName: 'edge-1' });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  const hose = await startFirehose(h);
  const c = await connectVia(server.udsPath, `127.0.0.1:${hose.port}`);
  assert.equal(c.status, 200);
  let received = c.rest.length;
  c.socket.on('data', (d: Buffer) => (received += d.length));
  c.socket.resume();
  h.defer(() => c.socket.destroy());

  // What waits on the link, as the kernel counts it: unsent in the agent's socket, unread in the relay's.
  const queuedOnLink = async (): Promise<number> => {
    const r = await run('ss', ['-tnH', 'state', 'established', `( sport = :${uplink.port} or dport = :${uplink.port} )`]);
    assert.equal(r.code, 0, `ss (iproute2): ${r.stderr}`);
    let bytes = 0;
    for (const line of r.stdout.split('\n')) {
      const [recvQ, sendQ, local, peer] = line.trim().split(/\s+/);
      if (peer?.endsWith(`:${uplink.port}`)) bytes += Number(sendQ);
      else if (local?.endsWith(`:${uplink.port}`)) bytes += Number(recvQ);
    }
    return bytes;
  };
  const samples: Array<{ at: number; bytes: number; received: number }> = [];
  const start = performance.now();
  while (performance.now() - start < 4000) {
    await new Promise((r) => setTimeout(r, 100));
    samples.push({ at: performance.now() - start, bytes: await queuedOnLink(), received });
  }
  // The announced window (128 KiB) drains over the first half second; then the window is the link's quarter second, 64 KiB.
  const late = samples.filter((s) => s.at >= 2000);
  assert.ok(late.length >= 5, `samples after 2 s: ${late.length}`);
  const most = Math.max(...late.map((s) => s.bytes));
  // At most twice the 128 KiB announced window: the relay shares this process's event loop, and on a loaded
  // machine it reads late, so its receive queue briefly holds ~100 KB more (seen: 203,284 bytes, at the
  // commit before issue 33's work too). A window widened to the reader (4 MiB) would queue megabytes.
  assert.ok(most <= 256 * 1024, `queued on the link after 2 s: up to ${most} bytes (${late.map((s) => s.bytes).join(', ')})`);
  assert.ok(late.at(-1)!.received > late[0]!.received, 'the flow still moves');
  assert.equal(server.log.find('agent connected')[0]!.fields.flowControl, true);
});
