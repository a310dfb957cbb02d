// What an idle agent link keeps on the server, counted rather than timed
// (issue 17: server memory with 1,000 idle agents). RSS is too noisy for a
// test; these count the state an idle link holds for its whole life.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { startServer, waitFor } from '../support/tunnel.js';

test('an agent link keeps no HPACK dynamic table: the server neither indexes its response head nor lets the agent index the request', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h);
  const session = http2.connect(`https://${server.agentAddress}`, { ca: pki.ca.cert, ...pki.agent('edge-hpack', 'ipv4=127.0.0.1&host=edge-hpack'), servername: 'localhost' });
  h.defer(() => session.destroy());
  session.on('error', () => {});
  await once(session, 'remoteSettings');
  assert.equal(session.remoteSettings.headerTableSize, 0, 'the server announces a header table of 0');
  const call = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: 'edge-hpack',
    agentidentifiers: 'ipv4=127.0.0.1&host=edge-hpack',
  });
  call.on('error', () => {});
  const [headers] = (await once(call, 'response')) as [http2.IncomingHttpHeaders];
  assert.equal(headers[':status'], 200);
  assert.equal(headers['grpc-status'], undefined, JSON.stringify(headers));
  await waitFor('the agent registered', () => server.tunnel.registry.all().length === 1);
  // A SETTINGS round trip: everything the server sent before its ACK has been read.
  await new Promise<void>((resolve, reject) => session.settings({}, (err) => (err ? reject(err) : resolve())));
  const state = session.state;
  // Our inflater mirrors the server's deflater: what the server indexed of its response head.
  assert.equal(state.inflateDynamicTableSize, 0, "the server's response head was indexed (its HPACK deflater keeps a table per link)");
  // Our deflater mirrors the server's inflater: emptied once the server's table size of 0 applied.
  assert.equal(state.deflateDynamicTableSize, 0, 'the request head stays indexed in the server (its HPACK inflater keeps a table per link)');
});
