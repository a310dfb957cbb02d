// Per-connection flow control (proto/yurttunnel_ext.proto) between our server
// and agent, and its absence towards upstream-style peers.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CONN_WINDOW_HEADER } from '../../pkg/protocol/flow-control.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, readExactly, startAgent, startEchoServer, startServer, startTCPServer, startTunnel, waitFor, waitForSteady } from '../support/tunnel.js';
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
  assert.deepEqual(call.metadata.get(CONN_WINDOW_HEADER), ['1048576']);
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
