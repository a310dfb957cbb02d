// A cancelled agent call must never read as a goodbye on the server's side.
// Node resets a client stream only after half-closing it (END_STREAM, then
// RST_STREAM), and our server takes END_STREAM for the agent leaving: with
// session resume that ended the session the agent was about to resume (a
// silent blip whose old path delivered the agent's cancel when it healed).
// Given its transport, ClientPacketCall.cancel drops the connection instead.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { BufferPool, releaseSlab, SLAB_HEADROOM } from '../../pkg/mux/buffer-pool.js';
import { testPKI } from '../support/pki.js';
import { test, type TestContext } from 'node:test';
import { ClientPacketCall } from '../../pkg/grpc/client-call.js';
import { ServerPacketCall } from '../../pkg/grpc/server-call.js';
import { GrpcStatus } from '../../pkg/grpc/status.js';

/** What our server's side of one call made of the cancel: a goodbye (the agent ended the stream, answered OK) or a failure. */
async function cancelSeenByServer(t: TestContext, withTransport: boolean): Promise<{ goodbye: boolean; reason: string }> {
  const server = http2.createServer();
  const ended = new Promise<{ goodbye: boolean; reason: string }>((resolve) => {
    server.on('stream', (stream) => {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      const call = new ServerPacketCall(stream);
      call.start({ onPacket: () => {}, onClose: (reason) => resolve({ goodbye: call.endStatus?.code === GrpcStatus.OK, reason }) });
    });
  });
  server.on('session', (s) => s.on('error', () => {}));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  client.on('error', () => {});
  t.after(() => {
    client.destroy();
    server.close();
  });
  const [, socket] = (await once(client, 'connect')) as [unknown, Socket];
  const stream = client.request({ ':method': 'POST', ':path': '/agent.AgentService/Connect', 'content-type': 'application/grpc' });
  await once(stream, 'response');
  const call = new ClientPacketCall(stream, {}, withTransport ? socket : undefined);
  const reasons: string[] = [];
  call.start({ onPacket: () => {}, onClose: (reason) => reasons.push(reason) });
  call.cancel('the link is taken for lost');
  assert.deepEqual(reasons, ['the link is taken for lost']);
  return ended;
}

test('cancelled with its transport: the server sees the connection fail, never END_STREAM', async (t) => {
  const seen = await cancelSeenByServer(t, true);
  assert.equal(seen.goodbye, false, `the server ended the call for: ${seen.reason}`);
});

test("cancelled without one (Node's stream reset): END_STREAM comes first, which is why the agent's calls get their transport", async (t) => {
  assert.deepEqual(await cancelSeenByServer(t, false), { goodbye: true, reason: 'agent ended the stream' });
});

test('cancelled on a dark path with DATA in flight: every pooled slab the writes held comes back', async (t) => {
  const pki = testPKI();
  const server = http2.createSecureServer({ cert: pki.server.cert, key: pki.server.key, settings: { initialWindowSize: 16 << 20 } });
  server.on('session', (s) => {
    s.on('error', () => {});
    s.setLocalWindowSize(64 << 20);
  });
  server.on('stream', (stream) => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' });
    stream.on('data', () => {});
    stream.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  // A path that can go dark: nothing more is read from the client, as behind a dead link with a full send buffer.
  const pairs: Array<[Socket, Socket]> = [];
  const relay = createServer((c) => {
    const u = connect((server.address() as AddressInfo).port, '127.0.0.1');
    c.pipe(u);
    u.pipe(c);
    c.on('error', () => {});
    u.on('error', () => {});
    pairs.push([c, u]);
  });
  relay.listen(0, '127.0.0.1');
  await once(relay, 'listening');
  const client = http2.connect(`https://127.0.0.1:${(relay.address() as AddressInfo).port}`, {
    ca: pki.ca.cert,
    servername: 'localhost',
    settings: { initialWindowSize: 16 << 20 },
  });
  client.on('error', () => {});
  t.after(() => {
    client.destroy();
    for (const [c, u] of pairs) {
      c.destroy();
      u.destroy();
    }
    relay.close();
    server.close();
  });
  const [, socket] = (await once(client, 'connect')) as [unknown, Socket];
  const stream = client.request({ ':method': 'POST', ':path': '/agent.AgentService/Connect', 'content-type': 'application/grpc' });
  await once(stream, 'response');
  const call = new ClientPacketCall(stream, {}, socket);
  call.start({ onPacket: () => {}, onClose: () => {} });
  const pool = new BufferPool();
  // A reader that sends as fast as the call lets it, as the agent's relays do.
  let sending = true;
  const sendNext = (): void => {
    if (!sending) return;
    const data = pool.take().subarray(SLAB_HEADROOM);
    call.sendData(1n, data, (err) => {
      if (!err) setImmediate(sendNext);
    });
    releaseSlab(data); // the reader's own hold: the write holds it now
  };
  sendNext();
  await sleep(50);
  for (const [c, u] of pairs) {
    c.unpipe(u);
    c.pause();
  }
  await sleep(200);
  sending = false;
  assert.ok(pool.outstanding > 0, 'writes were in flight when the call was cancelled (else this proves nothing)');
  call.cancel('the link is taken for lost');
  const deadline = Date.now() + 5000;
  while (pool.outstanding > 0 && Date.now() < deadline) await sleep(20);
  assert.equal(pool.outstanding, 0, 'every slab came back');
});
