// The agent endpoint's wire behaviour, checked with peers built from the
// .proto files by grpc-js/proto-loader (independent of our codec), and with
// raw HTTP/2 for what no well-behaved peer would send.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { encodePacket } from '../../pkg/protocol/codec.js';
import { decodePacket } from '../../pkg/protocol/decode.js';
import { GrpcDeframer, grpcFrameHeader } from '../../pkg/grpc/frame.js';
import type { KnownPacket, Packet } from '../../pkg/protocol/packet.js';
import { DEFAULT_LOG_BURST } from '../../pkg/log/log-limiter.js';
import { harness, type Harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, readExactly, startAgent, startEchoServer, startRelay, startServer, startTCPServer, startTunnel, waitFor } from '../support/tunnel.js';
import { scriptedAgent, scriptedServer, type ScriptedAgent } from '../support/upstream.js';

const INT64_MAX = '9223372036854775807';

/** A packet as the upstream-style server's proto-loader reads it (int64 as decimal strings). */
interface LoadedPacket {
  type: string;
  dialResponse?: { random: string; error: string; connectID: string };
  data?: { connectID: string; error: string; data: Buffer };
  closeResponse?: { connectID: string; error: string };
}

function agentTLS(name = 'edge-1', identifiers = ''): { ca: string; cert: string; key: string } {
  const pki = testPKI();
  return { ca: pki.ca.cert, ...pki.agent(name, identifiers) };
}

function upstreamAgent(h: Harness, address: string, agentID = 'edge-1', identifiers = 'ipv4=127.0.0.1&host=edge-1'): ScriptedAgent {
  return scriptedAgent(h, address, {
    metadata: [
      ['agentid', agentID],
      ['agentidentifiers', identifiers],
    ],
    tls: agentTLS(agentID, identifiers),
  });
}

test('serverid and servercount headers arrive before any packet', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { serverCount: 3 }, serverID: 'server-a' });
  const agent = upstreamAgent(h, server.agentAddress);
  const md = await agent.headers;
  assert.deepEqual(md.get('serverid'), ['server-a']);
  assert.deepEqual(md.get('servercount'), ['3']);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
});

test('a call without exactly one agentid fails with INVALID_ARGUMENT and a clear message', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const none = scriptedAgent(h, server.agentAddress, { metadata: [['agentidentifiers', 'host=x']], tls: agentTLS() });
  const s1 = await none.status;
  assert.equal(s1.code, 3);
  assert.equal(s1.details, 'expected one agent ID in the "agentid" metadata, got 0');
  const two = scriptedAgent(h, server.agentAddress, {
    metadata: [
      ['agentid', 'a'],
      ['agentid', 'b'],
    ],
    tls: agentTLS(),
  });
  const s2 = await two.status;
  assert.equal(s2.code, 3);
  assert.equal(s2.details, 'expected one agent ID in the "agentid" metadata, got 2');
  assert.equal(server.tunnel.registry.agentCount, 0);
  assert.equal(server.log.find('agent call rejected').length, 2);
  // Still serving.
  const ok = upstreamAgent(h, server.agentAddress);
  await ok.headers;
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
});

test('unknown identifier keys are ignored with one warning per call naming them; known ones still route', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', identifiers: 'ipv4=127.0.0.1&zone=eu&host=edge-1' });
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const warned = server.log.find('ignoring unknown agent identifier keys');
  assert.equal(warned.length, 1);
  assert.deepEqual(warned[0]!.fields.firstKeys, ['zone']);
  assert.equal(warned[0]!.fields.unknownKeys, 1);
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200);
  res.socket.destroy();
});

test('int64 random and connectID of 2^63-1 survive the server ↔ upstream agent round trip exactly', async (t) => {
  const h = harness(t);
  // A short linger: an upstream agent cannot half-close, so our end waits for it at most this long before CLOSE_REQ.
  const server = await startServer(h, { tunnel: { newDialID: () => BigInt(INT64_MAX), lingerAfterEndMs: 100 } });
  const agent = upstreamAgent(h, server.agentAddress);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const dialing = server.tunnel.dial('127.0.0.1:10250');
  const req = await agent.next();
  assert.equal(req.type, 'DIAL_REQ');
  assert.deepEqual(req.dialRequest, { protocol: 'tcp', address: '127.0.0.1:10250', random: INT64_MAX });
  agent.call.write({ type: 'DIAL_RSP', dialResponse: { error: '', connectID: INT64_MAX, random: INT64_MAX } });
  const conn = await dialing;
  assert.equal(conn.connectID, BigInt(INT64_MAX));
  conn.write('ping');
  const data = await agent.next();
  assert.equal(data.type, 'DATA');
  assert.equal(data.data?.connectID, INT64_MAX);
  assert.equal(data.data.data.toString(), 'ping');
  agent.call.write({ type: 'DATA', data: { connectID: INT64_MAX, error: '', data: Buffer.from('pong') } });
  const [got] = (await once(conn, 'data')) as [Buffer];
  assert.equal(got.toString(), 'pong');
  conn.end();
  const close = await agent.next();
  assert.deepEqual(close, { type: 'CLOSE_REQ', payload: 'closeRequest', closeRequest: { connectID: INT64_MAX } });
  agent.call.write({ type: 'CLOSE_RSP', closeResponse: { error: '', connectID: INT64_MAX } });
  await waitFor('the connection to close', () => conn.destroyed);
});

test('our agent echoes random 2^63-1 exactly to an upstream-style server and serves the connection', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const echo = await startEchoServer(h);
  const upstream = await scriptedServer(h, { serverID: 'go-like', serverCount: 1, tls: { ca: pki.ca.cert, ...pki.server } });
  startAgent(h, `127.0.0.1:${upstream.port}`, { nodeName: 'edge-1', connection: { serverName: 'localhost' } });
  const call = await upstream.nextCall();
  assert.deepEqual(call.metadata.get('agentid'), ['edge-1']);
  assert.deepEqual(call.metadata.get('agentidentifiers'), ['ipv4=127.0.0.1&host=edge-1']);
  const packets: LoadedPacket[] = [];
  call.on('data', (p: LoadedPacket) => packets.push(p));
  call.write({ type: 'DIAL_REQ', dialRequest: { protocol: 'tcp', address: `127.0.0.1:${echo.port}`, random: INT64_MAX } });
  await waitFor('DIAL_RSP', () => packets.length >= 1);
  assert.equal(packets[0]!.type, 'DIAL_RSP');
  assert.equal(packets[0]!.dialResponse?.random, INT64_MAX);
  assert.equal(packets[0]!.dialResponse.error, '');
  const connectID = packets[0]!.dialResponse.connectID;
  assert.equal(connectID, '1');
  call.write({ type: 'DATA', data: { connectID, error: '', data: Buffer.from('hello') } });
  await waitFor('echoed DATA', () => packets.length >= 2);
  assert.equal(packets[1]!.type, 'DATA');
  assert.equal(packets[1]!.data?.data.toString(), 'hello');
  call.write({ type: 'CLOSE_REQ', closeRequest: { connectID } });
  await waitFor('CLOSE_RSP', () => packets.some((p) => p.type === 'CLOSE_RSP'));
  assert.deepEqual(packets.find((p) => p.type === 'CLOSE_RSP')!.closeResponse, { error: '', connectID });
  // Unknown and Go-ignored packets do not upset the agent.
  call.write({ type: 'DIAL_CLS', closeDial: { random: '5' } });
  call.write({ type: 'CLOSE_REQ', closeRequest: { connectID: '99' } });
  await waitFor('CLOSE_RSP for the unknown ID', () => packets.some((p) => p.closeResponse?.connectID === '99'));
  assert.equal(packets.find((p) => p.closeResponse?.connectID === '99')!.closeResponse?.error, 'Unknown connectID');
});

test('two agents: destHost sends each host to its own agent', async (t) => {
  const h = harness(t);
  const targetA = await startTCPServer(h, (s) => s.end('served by A'));
  const targetB = await startTCPServer(h, (s) => s.end('served by B'));
  const server = await startServer(h);
  const a = startAgent(h, server.agentAddress, {
    nodeName: 'edge-a',
    identifiers: 'ipv4=127.0.0.2&host=edge-a',
    allowList: AllowList.parse(`127.0.0.1:${targetA.port}`),
  });
  const b = startAgent(h, server.agentAddress, {
    nodeName: 'edge-b',
    identifiers: 'ipv4=127.0.0.3&host=edge-b',
    allowList: AllowList.parse(`127.0.0.1:${targetB.port}`),
  });
  await waitFor('both agents', () => server.tunnel.registry.agentCount === 2);
  for (const [host, port, want] of [
    ['edge-a', targetA.port, 'served by A'],
    ['edge-b', targetB.port, 'served by B'],
  ] as const) {
    for (let i = 0; i < 3; i++) {
      const res = await connectVia(server.udsPath, `127.0.0.1:${port}`, { headers: { 'X-Tunnel-Proxy-Host': host } });
      assert.equal(res.status, 200, `${host} via header`);
      assert.equal((await readExactly(res.socket, want.length, res.rest)).toString(), want);
      res.socket.destroy();
    }
  }
  // By the advertised IP, the dial host picks the agent (the agent's allow-list shows which one dialled).
  const viaIP = await connectVia(server.udsPath, `127.0.0.2:${targetA.port}`);
  assert.equal(viaIP.status, 502, 'agent A was chosen and refused 127.0.0.2 (not in its allow-list)');
  assert.match(viaIP.rest.toString(), /^agent edge-a refused to dial 127\.0\.0\.2:/);
  assert.equal(a.log.find('dial failed').length, 1);
  assert.equal(b.log.find('dial failed').length, 0);
});

test('an agent whose certificate comes from another CA, or that has none, is refused', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h);
  const intruder = startAgent(h, server.agentAddress, {
    nodeName: 'intruder',
    tls: { ca: pki.ca.cert, ...pki.foreign.client },
    connection: { serverName: 'localhost' },
  });
  await waitFor('the intruder to give up a first time', () => intruder.log.find('could not connect').length >= 1);
  assert.equal(server.tunnel.registry.agentCount, 0);
  await waitFor('the server to log the refused handshake', () => server.log.find('agent TLS handshake failed').length >= 1);
  await intruder.stop();

  // No client certificate at all: the handshake ends with TLS alert "certificate required".
  const port = Number(server.agentAddress.split(':')[1]);
  const socket = tlsConnect({ host: '127.0.0.1', port, servername: 'localhost', ca: pki.ca.cert, ALPNProtocols: ['h2'] });
  socket.on('data', () => {});
  const [err] = (await once(socket, 'error')) as [Error];
  assert.match(err.message, /alert certificate required/);
  socket.destroy();
  await waitFor('the server to log it', () =>
    server.log.find('agent TLS handshake failed').some((r) => /peer did not return a certificate/.test(String(r.fields.error))),
  );
  assert.equal(server.tunnel.registry.agentCount, 0);
});

test("a garbage message ends only that agent's call, with INTERNAL; others keep working", async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h);
  const session = http2.connect(`https://${server.agentAddress}`, { ca: pki.ca.cert, ...pki.agent('bad'), servername: 'localhost' });
  h.defer(() => session.destroy());
  const stream = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: 'bad',
    agentidentifiers: 'host=bad',
  });
  const [headers] = (await once(stream, 'response')) as [http2.IncomingHttpHeaders];
  assert.equal(headers.serverid, 'test-server');
  await waitFor('the bad agent to register', () => server.tunnel.registry.agentCount === 2);
  // A gRPC message whose protobuf claims a 100-byte field but holds 2 bytes.
  stream.write(Buffer.from([0, 0, 0, 0, 4, 0x22, 100, 0x08, 0x01]));
  const [trailers] = (await once(stream, 'trailers')) as [http2.IncomingHttpHeaders];
  assert.equal(trailers['grpc-status'], '13');
  assert.match(decodeURIComponent(String(trailers['grpc-message'])), /malformed packet: truncated field/);
  await waitFor('the bad agent to be dropped', () => server.tunnel.registry.agentCount === 1);
  stream.destroy();
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200, 'the good agent still serves');
  res.socket.destroy();
});

test('unknown packet types are logged and ignored; the stream keeps working', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const agent = upstreamAgent(h, server.agentAddress);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  agent.call.write({ type: 9 as unknown as string });
  await waitFor('the warning', () => server.log.find('ignoring a packet agents do not send').length === 1);
  assert.equal(server.log.find('ignoring a packet agents do not send')[0]!.fields.typeNumber, 9);
  const dialing = server.tunnel.dial('127.0.0.1:10250');
  const req = await agent.next();
  agent.call.write({
    type: 'DIAL_RSP',
    dialResponse: { error: 'dial tcp 127.0.0.1:10250: connect: connection refused', connectID: '0', random: req.dialRequest!.random },
  });
  await assert.rejects(dialing, { code: 'YT_ERR_DIAL_FAILED' });
});

test("when an agent's stream ends, its pending dials fail at once and its connections close", async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const agent = upstreamAgent(h, server.agentAddress);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const established = server.tunnel.dial('127.0.0.1:1001');
  const r1 = await agent.next();
  agent.call.write({ type: 'DIAL_RSP', dialResponse: { error: '', connectID: '7', random: r1.dialRequest!.random } });
  const conn = await established;
  const errors: Error[] = [];
  conn.on('error', (err) => errors.push(err));
  const pending = connectVia(server.udsPath, '127.0.0.1:1002');
  await agent.next(); // the second DIAL_REQ, never answered
  const started = performance.now();
  agent.close();
  const res = await pending;
  assert.equal(res.status, 502);
  assert.match(res.rest.toString(), /^agent edge-1 disconnected while dialing 127\.0\.0\.1:1002: /);
  await waitFor('the established connection to close', () => conn.destroyed, 1000);
  assert.equal(errors.length, 1);
  assert.equal(errors[0]!.name, 'ConnectionClosedError');
  assert.match(errors[0]!.message, /^agent edge-1 disconnected: /);
  assert.ok(performance.now() - started < 1000);
  assert.equal(server.tunnel.pendingDialCount, 0);
});

test('of several streams from one agent the oldest serves; a draining agent is used only as a last resort', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const first = upstreamAgent(h, server.agentAddress);
  await waitFor('first', () => server.tunnel.registry.all().length === 1);
  const second = upstreamAgent(h, server.agentAddress);
  await waitFor('second', () => server.tunnel.registry.all().length === 2);
  void server.tunnel.dial('127.0.0.1:1', { timeoutMs: 5000 }).catch(() => {});
  assert.equal((await first.next()).type, 'DIAL_REQ', 'the oldest stream got the dial');
  first.call.write({ type: 'DRAIN', drain: {} });
  await waitFor('draining', () => server.tunnel.registry.all().some((b) => b.draining));
  void server.tunnel.dial('127.0.0.1:2', { timeoutMs: 5000 }).catch(() => {});
  assert.equal((await second.next()).dialRequest?.address, '127.0.0.1:2', 'the non-draining stream got it');
  second.close();
  await waitFor('second gone', () => server.tunnel.registry.all().length === 1);
  void server.tunnel.dial('127.0.0.1:3', { timeoutMs: 5000 }).catch(() => {});
  assert.equal((await first.next()).dialRequest?.address, '127.0.0.1:3', 'draining, but the only one left');
});

/** A raw HTTP/2 agent: one Connect call, our codec on its packets, pings under the test's control. */
async function rawAgent(h: Harness, address: string, agentID = 'pinger') {
  const pki = testPKI();
  const session = http2.connect(`https://${address}`, { ca: pki.ca.cert, ...pki.agent(agentID, `ipv4=127.0.0.1&host=${agentID}`), servername: 'localhost' });
  h.defer(() => session.destroy());
  // Node reports a GOAWAY with an error code as a session error too.
  session.on('error', () => {});
  await once(session, 'connect');
  const goaways: Array<[number, string]> = [];
  session.on('goaway', (code: number, _last: number, data?: Buffer) => goaways.push([code, data?.toString() ?? '']));
  const call = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: agentID,
    agentidentifiers: `ipv4=127.0.0.1&host=${agentID}`,
  });
  call.on('error', () => {});
  const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => {
    call.once('trailers', resolve);
    call.once('close', () => resolve({}));
  });
  const deframer = new GrpcDeframer(64 * 1024 * 1024);
  const packets: Packet[] = [];
  let received = 0;
  const onChunk: Array<() => void> = [];
  call.on('data', (chunk: Buffer) => {
    received += chunk.length;
    for (const m of deframer.push(chunk)) packets.push(decodePacket(m));
    for (const f of onChunk) f();
  });
  const send = (p: KnownPacket): void => {
    const body = encodePacket(p);
    call.write(Buffer.concat([grpcFrameHeader(body.length), body]));
  };
  const ping = (): Promise<void> =>
    new Promise((resolve) => {
      if (session.destroyed || !session.ping(() => resolve())) resolve();
    });
  return { session, call, goaways, trailers, packets, send, ping, onChunk, received: () => received };
}

test('a client pinging rapidly while it receives data is forgiven, as by grpc-go (no GOAWAY)', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 30_000 } });
  const agent = await rawAgent(h, server.agentAddress);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const dialing = server.tunnel.dial('127.0.0.1:10250');
  await waitFor('DIAL_REQ', () => agent.packets.length >= 1);
  const req = agent.packets[0]!;
  assert.equal(req.type, 'DIAL_REQ');
  agent.send({ type: 'DIAL_RSP', error: '', connectID: 7n, random: req.random });
  const conn = await dialing;
  conn.on('error', () => {}); // a GOAWAY would fail the assertions below, not the process
  // Like grpc-go's BDP estimator: a PING on every chunk of DATA that arrives.
  let pings = 0;
  agent.onChunk.push(() => {
    pings++;
    void agent.ping();
  });
  const total = 8 * 1024 * 1024;
  const chunk = Buffer.alloc(1024 * 1024, 1);
  for (let i = 0; i < total / chunk.length; i++) conn.write(chunk);
  await waitFor('all the data', () => agent.received() >= total || agent.goaways.length > 0, 60_000);
  assert.ok(pings > 3, `the client pinged ${pings} times`);
  assert.deepEqual(agent.goaways, []);
  assert.equal(server.log.find('agent pings too often').length, 0);
  conn.destroy();
});

test('many connections that ping too often: each gets its GOAWAY, the log a bounded number of lines', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 1000 } });
  const agents = await Promise.all(Array.from({ length: 12 }, (_, i) => rawAgent(h, server.agentAddress, `pinger-${i}`)));
  await Promise.all(
    agents.map(async (agent) => {
      const closed = new Promise((resolve) => agent.session.once('close', resolve));
      for (let i = 0; i < 10 && !agent.session.destroyed; i++) await agent.ping();
      assert.match(String((await agent.trailers)['grpc-message']), /^too_many_pings/);
      await closed;
    }),
  );
  for (const agent of agents) assert.deepEqual(agent.goaways.filter(([code]) => code === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM).length, 1);
  assert.equal(server.log.find('agent pings too often').length, DEFAULT_LOG_BURST, 'the first lines of the interval; the rest counted');
});

test('rapid pings on an idle connection get exactly one GOAWAY too_many_pings; the call ends saying why', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 1000 } });
  const agent = await rawAgent(h, server.agentAddress);
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const closed = new Promise((resolve) => agent.session.once('close', resolve));
  // Each ping waits for its ACK; the server keeps answering pings until it closes.
  for (let i = 0; i < 10 && !agent.session.destroyed; i++) await agent.ping();
  const trailers = await agent.trailers;
  assert.equal(trailers['grpc-status'], '14');
  assert.match(String(trailers['grpc-message']), /^too_many_pings: the agent pinged more often than every 1000 ms/);
  await closed;
  assert.deepEqual(
    agent.goaways.filter(([code]) => code !== http2.constants.NGHTTP2_NO_ERROR),
    [[http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'too_many_pings']],
  );
  assert.equal(server.log.find('agent pings too often').length, 1);
  assert.match(String(server.log.find('agent disconnected')[0]?.fields.reason), /^too_many_pings/);
  await waitFor('the agent gone', () => server.tunnel.registry.agentCount === 0);
});

test("pings at the policy's pace are fine", async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 100 } });
  const session = http2.connect(`https://${server.agentAddress}`, { ca: pki.ca.cert, ...pki.agent('pinger'), servername: 'localhost' });
  h.defer(() => session.destroy());
  await once(session, 'connect');
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  for (let i = 0; i < 6; i++) {
    if (i > 0) await sleep(120); // the pinger's pace, above the 100 ms minimum
    await new Promise<void>((resolve, reject) => session.ping((err) => (err ? reject(err) : resolve())));
  }
  // The server answers frames in order: a GOAWAY for the last ping would arrive before this SETTINGS ACK.
  await new Promise<void>((resolve, reject) => session.settings({}, (err) => (err ? reject(err) : resolve())));
  assert.equal(goaway, false);
});

test("a silent agent link is dropped by the server's keepalive; a silent server link by the agent's", async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { keepaliveTimeMs: 200, keepaliveTimeoutMs: 300 } });
  const relay = await startRelay(h, Number(server.agentAddress.split(':')[1]));
  const agent = startAgent(h, `127.0.0.1:${relay.port}`, {
    nodeName: 'edge-1',
    connection: { serverName: 'localhost', keepaliveTimeMs: 300, keepaliveTimeoutMs: 300 },
  });
  await waitFor('the link, on both sides', () => server.tunnel.registry.agentCount === 1 && agent.clients.connectedServers === 1);
  relay.freeze();
  // A frozen path gives TCP nothing to fail on: only the keepalive pings notice it (300 + 300 ms; 10 s of room for load).
  await waitFor('the server to drop the agent', () => server.tunnel.registry.agentCount === 0, 10_000);
  assert.ok(server.log.find('did not answer a keepalive ping').length >= 1);
  assert.match(String(server.log.find('agent disconnected')[0]?.fields.reason), /^no answer to a keepalive ping within 300 ms$/);
  await waitFor('the agent to notice', () => agent.log.find('lost connection to tunnel server').length >= 1, 10_000);
  assert.ok(agent.log.find('tunnel server did not answer a keepalive ping').length >= 1, 'the agent noticed by its own pings');
});

test('a message whose prefix claims 2 GiB ends the call with RESOURCE_EXHAUSTED and a reset; the server stops reading', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const agent = await rawAgent(h, server.agentAddress, 'bloater');
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const closed = new Promise<void>((resolve) => agent.call.once('close', resolve));
  let isClosed = false;
  void closed.then(() => (isClosed = true));
  agent.call.write(Buffer.from([0, 0x80, 0, 0, 0])); // 2 GiB
  // Then keep sending, as a client that believes its message is going through.
  const chunk = Buffer.alloc(64 * 1024, 7);
  let written = 0;
  const limit = 256 * 1024 * 1024;
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set when the call closes
  for (let sent = 0; sent < limit && !isClosed && agent.call.writable; sent += chunk.length) {
    const more = agent.call.write(chunk, (err) => {
      if (!err) written += chunk.length;
    });
    if (!more) await Promise.race([once(agent.call, 'drain').catch(() => {}), closed]);
  }
  await closed;
  const trailers = await agent.trailers;
  assert.equal(trailers['grpc-status'], '8');
  assert.match(String(trailers['grpc-message']), /2147483648/);
  assert.equal(agent.call.rstCode, http2.constants.NGHTTP2_NO_ERROR, 'the server reset the stream after its status');
  assert.ok(written < 32 * 1024 * 1024, `the server took only about a window's worth, not everything (${written} bytes)`);
  await waitFor('the agent gone', () => server.tunnel.registry.agentCount === 0);
});

test('one agent holds at most maxStreamsPerAgent Connect streams; more get RESOURCE_EXHAUSTED saying why', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { endpoint: { maxStreamsPerAgent: 2, identityCheck: 'none' } });
  const first = upstreamAgent(h, server.agentAddress, 'edge-1');
  const second = upstreamAgent(h, server.agentAddress, 'edge-1');
  await Promise.all([first.headers, second.headers]);
  await waitFor('both registered', () => server.tunnel.registry.all().length === 2);
  const third = upstreamAgent(h, server.agentAddress, 'edge-1');
  const s = await third.status;
  assert.equal(s.code, 8);
  assert.match(s.details, /^too many Connect streams: .* already holds 2 \(limit 2, the server flag --max-agent-streams\)/);
  assert.equal(server.endpoint.refusals.stream_limit, 1);
  assert.equal(server.log.find('agent call rejected').length, 1);
  // The same certificate under another agentID is counted too (with the identity check off, as for upstream agents).
  const impostor = scriptedAgent(h, server.agentAddress, { metadata: [['agentid', 'edge-9']], tls: agentTLS('edge-1', 'ipv4=127.0.0.1&host=edge-1') });
  assert.equal((await impostor.status).code, 8);
  assert.equal(server.tunnel.registry.all().length, 2);
  // A stream that ends frees its place.
  first.close();
  await waitFor('first gone', () => server.tunnel.registry.all().length === 1);
  const fourth = upstreamAgent(h, server.agentAddress, 'edge-1');
  await fourth.headers;
  await waitFor('fourth registered', () => server.tunnel.registry.all().length === 2);
});

test('an error thrown by a call or packet handler fails only that call (INTERNAL, logged with its stack); the server keeps serving', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const tunnel = server.tunnel;
  // A faulty tunnel: a bug in the packet path.
  const handlePacket = tunnel.handlePacket.bind(tunnel);
  tunnel.handlePacket = () => {
    throw new Error('injected packet-handler bug');
  };
  const agent = upstreamAgent(h, server.agentAddress);
  await waitFor('registration', () => tunnel.registry.agentCount === 1);
  agent.call.write({ type: 'DIAL_RSP', dialResponse: { error: '', connectID: '1', random: '1' } });
  const s1 = await agent.status;
  assert.equal(s1.code, 13);
  assert.equal(s1.details, 'internal error handling a DIAL_RSP packet');
  const logged = server.log.find('internal error handling a packet')[0];
  assert.match(String(logged?.fields.stack), /injected packet-handler bug\n\s+at /);
  await waitFor('the agent gone', () => tunnel.registry.agentCount === 0);
  tunnel.handlePacket = handlePacket;

  // A bug while accepting a call.
  const attachAgent = tunnel.attachAgent.bind(tunnel);
  tunnel.attachAgent = () => {
    throw new Error('injected accept bug');
  };
  const second = upstreamAgent(h, server.agentAddress);
  const s2 = await second.status;
  assert.equal(s2.code, 13, 'the headers were out; the stream is reset with INTERNAL_ERROR');
  assert.match(String(server.log.find('internal error handling a gRPC call')[0]?.fields.stack), /injected accept bug/);
  tunnel.attachAgent = attachAgent;

  // Still serving.
  const third = upstreamAgent(h, server.agentAddress);
  await third.headers;
  await waitFor('registration', () => tunnel.registry.agentCount === 1);
});

test('an agent that does not read while provoking control packets is cut off, not buffered without end', async (t) => {
  const h = harness(t);
  // The limit on packets for unknown connections would cut it off first; this is about the control buffer.
  const server = await startServer(h, { endpoint: { controlBufferLimit: 64 * 1024 }, tunnel: { maxUnknownPacketsPerAgent: 0 } });
  const agent = await rawAgent(h, server.agentAddress, 'deaf');
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  agent.call.pause(); // reads nothing from now on: no window for the server
  agent.call.removeAllListeners('data');
  const closed = new Promise<void>((resolve) => agent.call.once('close', resolve));
  let isClosed = false;
  void closed.then(() => (isClosed = true));
  // Each DATA for an unknown connectID makes the server answer with CLOSE_REQ.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set when the call closes
  for (let batch = 0; batch < 40 && !isClosed; batch++) {
    const frames: Buffer[] = [];
    for (let i = 1; i <= 1000; i++) {
      const body = encodePacket({ type: 'DATA', connectID: BigInt(batch * 1000 + i), error: '', data: Buffer.alloc(0) });
      frames.push(grpcFrameHeader(body.length), body);
    }
    if (!agent.call.write(Buffer.concat(frames))) await Promise.race([once(agent.call, 'drain').catch(() => {}), closed]);
  }
  await closed;
  assert.equal(agent.call.rstCode, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM);
  assert.equal(server.endpoint.refusals.unread_control, 1);
  assert.match(
    String(server.log.find('agent disconnected')[0]?.fields.reason),
    /^the peer does not read: \d+ bytes of control packets wait to be written \(limit 65536\)$/,
  );
  await waitFor('the agent gone', () => server.tunnel.registry.agentCount === 0);
});

test("an agent sending packets for connections it does not hold is cut off past the limit and told why; another agent's traffic goes on", async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const server = await startServer(h, { tunnel: { maxUnknownPacketsPerAgent: 300 } });
  startAgent(h, server.agentAddress, { nodeName: 'edge-2', identifiers: 'ipv4=127.0.0.2&host=edge-2' });
  const bad = await rawAgent(h, server.agentAddress, 'bad');
  await waitFor('both agents', () => server.tunnel.registry.agentCount === 2);
  const viaGood = { headers: { 'X-Tunnel-Proxy-Host': 'edge-2' } };
  const open = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, viaGood);
  assert.equal(open.status, 200);
  open.socket.write('before');
  assert.equal((await readExactly(open.socket, 6, open.rest)).toString(), 'before');

  const registry = server.tunnel.metrics.registry;
  const unknownPackets = async (): Promise<number> =>
    (await registry.getSingleMetric('yurttunnel_server_unknown_connection_packets_total')!.get()).values.reduce((n, v) => n + v.value, 0);
  // 100 of each kind: the limit, not past it.
  for (let i = 1; i <= 100; i++) {
    const id = BigInt(1_000_000 + i);
    bad.send({ type: 'DATA', connectID: id, error: '', data: Buffer.from('x') });
    bad.send({ type: 'DIAL_RSP', random: id, connectID: id, error: '' });
    bad.send({ type: 'CLOSE_RSP', connectID: id, error: '' });
  }
  for (let tries = 0; (await unknownPackets()) < 300; tries++) {
    assert.ok(tries < 500, 'the server counts the 300 packets');
    await sleep(10);
  }
  assert.equal(server.tunnel.registry.agentCount, 2, 'at the limit the agent stays');
  bad.send({ type: 'DATA', connectID: 1n, error: '', data: Buffer.from('x') });
  const trailers = await Promise.race([
    bad.trailers,
    sleep(10_000, undefined, { ref: false }).then(() => assert.fail('the agent was not cut off within 10 s')),
  ]);
  assert.equal(trailers['grpc-status'], '8', 'RESOURCE_EXHAUSTED');
  assert.equal(
    decodeURIComponent(String(trailers['grpc-message'])),
    'agent bad sent 301 packets for connections it does not hold within 10000 ms (limit 300, the server flag ' +
      '--max-unknown-packets-per-agent); the server closed its stream',
  );
  await waitFor('the bad agent gone', () => server.tunnel.registry.agentCount === 1);
  const cutOff = await registry.getSingleMetric('yurttunnel_server_agent_streams_cut_off_total')!.get();
  assert.deepEqual(
    cutOff.values.map((v) => [v.labels.reason, v.value]),
    [['unknown_connection_packets', 1]],
  );
  assert.equal(server.log.find('agent cut off').length, 1);
  assert.ok(server.log.find('packet for a connection the agent does not hold').length <= 5, 'a few lines, not one per packet');

  // The other agent's open connection and new dials go on.
  open.socket.write('after');
  assert.equal((await readExactly(open.socket, 5)).toString(), 'after');
  const again = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, viaGood);
  assert.equal(again.status, 200);
  again.socket.destroy();
  open.socket.destroy();
});

test('an agent that floods packets for unknown connections and reads nothing is cut off all the same, and no longer read', async (t) => {
  const h = harness(t);
  const server = await startServer(h, { tunnel: { maxUnknownPacketsPerAgent: 1000 } });
  const bad = await rawAgent(h, server.agentAddress, 'deaf');
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  bad.call.pause();
  bad.call.removeAllListeners('data');
  const frames: Buffer[] = [];
  for (let i = 1; i <= 2000; i++) {
    const body = encodePacket({ type: 'DATA', connectID: BigInt(i), error: '', data: Buffer.alloc(0) });
    frames.push(grpcFrameHeader(body.length), body);
  }
  bad.call.write(Buffer.concat(frames));
  await waitFor('the agent gone', () => server.tunnel.registry.agentCount === 0);
  assert.equal(server.log.find('agent cut off').length, 1);
  // The server stops reading it: after the status, the stream is reset.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined until the stream is reset, whatever @types/node says
  await waitFor('the stream reset', () => bad.call.rstCode !== undefined, 15_000);
});
