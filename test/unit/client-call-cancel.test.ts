// A cancelled agent call must never read as a goodbye on the server's side.
// Node resets a client stream only after half-closing it (END_STREAM, then
// RST_STREAM), and our server takes END_STREAM for the agent leaving: with
// session resume that ended the session the agent was about to resume (a
// silent blip whose old path delivered the agent's cancel when it healed).
// Given its transport, ClientPacketCall.cancel drops the connection instead.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
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
