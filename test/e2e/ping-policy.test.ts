// grpc-go's ping policy, as a Go agent meets it: grpc-go clients ping while
// they receive data (BDP estimation), far more often than the 30 s minimum,
// and a grpc-go server forgives every ping that follows a frame it wrote. A
// server that counted only the messages it queued would strike those pings and
// send GOAWAY in the middle of a transfer.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { test } from 'node:test';
import { decodePacket, encodePacket } from '../../pkg/protocol/codec.js';
import { GrpcDeframer, grpcFrameHeader } from '../../pkg/protocol/grpc-frame.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, startServer, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

test('pings that follow the server\'s DATA are forgiven, however often: a BDP-pinging agent receives 2 MiB without GOAWAY', LIMIT, async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 60_000 } });
  // A small stream window makes the server's queued messages go out a frame at a time, over many round trips.
  const session = http2.connect(`https://${server.agentAddress}`, {
    ca: pki.ca.cert,
    ...pki.agent('pinger', 'ipv4=127.0.0.9'),
    servername: 'localhost',
    settings: { initialWindowSize: 16 * 1024 },
  });
  h.defer(() => session.destroy());
  session.on('error', () => {});
  let goaway = false;
  session.on('goaway', () => (goaway = true));
  await once(session, 'connect');
  const call = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: 'pinger',
    agentidentifiers: 'ipv4=127.0.0.9',
  });
  call.on('error', () => {});
  const send = (p: KnownPacket): void => {
    const body = encodePacket(p);
    call.write(Buffer.concat([grpcFrameHeader(body.length), body]));
  };
  const deframer = new GrpcDeframer();
  let received = 0;
  let pingOutstanding = false;
  let pings = 0;
  call.on('data', (chunk: Buffer) => {
    // As grpc-go's BDP estimator: a ping on received data whenever none is outstanding.
    if (!pingOutstanding && !session.destroyed) {
      pingOutstanding = true;
      pings++;
      session.ping(() => (pingOutstanding = false));
    }
    for (const message of deframer.push(chunk)) {
      const p = decodePacket(message);
      if (p.type === 'DIAL_REQ') send({ type: 'DIAL_RSP', random: p.random, connectID: 1n, error: '' });
      if (p.type === 'DATA') received += p.data.length;
    }
  });
  await waitFor('the agent to register', () => server.tunnel.registry.agentCount === 1);

  const client = await connectVia(server.udsPath, '127.0.0.9:80');
  h.defer(() => client.socket.destroy());
  assert.equal(client.status, 200);
  const total = 2 * 1024 * 1024;
  client.socket.write(Buffer.alloc(total, 1));
  await waitFor('2 MiB at the agent', () => received === total || goaway, 30_000);
  assert.equal(goaway, false, `GOAWAY after ${pings} pings`);
  assert.equal(received, total);
  assert.ok(pings > 10, `the agent pinged ${pings} times`);
  assert.equal(server.log.find('agent pings too often').length, 0);
});

test('pings on an idle connection strike out: exactly one GOAWAY too_many_pings, and the call ends saying why', LIMIT, async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h, { endpoint: { minPingIntervalMs: 60_000 } });
  const session = http2.connect(`https://${server.agentAddress}`, { ca: pki.ca.cert, ...pki.agent('pinger'), servername: 'localhost' });
  h.defer(() => session.destroy());
  session.on('error', () => {});
  const goaways: Array<[number, string]> = [];
  session.on('goaway', (code: number, _last: number, data?: Buffer) => goaways.push([code, data?.toString() ?? '']));
  await once(session, 'connect');
  const call = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: 'pinger',
  });
  call.on('error', () => {});
  call.resume();
  const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => call.once('trailers', resolve));
  await once(call, 'response');
  await waitFor('the agent to register', () => server.tunnel.registry.agentCount === 1);
  // The response headers were our last traffic: the first ping is forgiven, the next three strike.
  for (let i = 0; i < 8 && !session.destroyed && !session.closed; i++) {
    await new Promise<void>((resolve) => {
      if (!session.ping(() => resolve())) resolve();
    });
  }
  const t1 = await trailers;
  assert.equal(t1['grpc-status'], '14');
  assert.match(decodeURIComponent(String(t1['grpc-message'])), /^too_many_pings: /);
  await waitFor('the session to close', () => session.closed || session.destroyed, 5000);
  assert.deepEqual(goaways, [[http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, 'too_many_pings']]);
  assert.equal(server.log.find('agent pings too often').length, 1);
  await waitFor('the agent to be gone', () => server.tunnel.registry.agentCount === 0);
});
