// What an idle agent link keeps on the server, counted rather than timed
// (issue 17: server memory with 1,000 idle agents). RSS is too noisy for a
// test; these count the state an idle link holds for its whole life.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { startAgent, startServer, waitFor, waitForSteady } from '../support/tunnel.js';
import { exposedGc } from '../support/gc.js';

test('an agent link keeps no HPACK dynamic table: the server neither indexes its response head nor lets the agent index the request', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const server = await startServer(h);
  const session = http2.connect(`https://${server.agentAddress}`, {
    ca: pki.ca.cert,
    ...pki.agent('edge-hpack', 'ipv4=127.0.0.1&host=edge-hpack'),
    servername: 'localhost',
  });
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

/** A full GC (twice: what the first frees may hold more), whether or not node was started with --expose-gc. */
function collect(): void {
  const gc = exposedGc();
  gc();
  gc();
}

test('idle agent links, session resume on, keep no buffers at either end (ArrayBuffer bytes per link, an upper bound)', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const links = 24;
  const server = await startServer(h, { endpoint: { identityCheck: 'none', maxConnectRate: 0, maxStreamsPerAgent: 1000, resumeWindowMs: 10_000 } });
  // One certificate for all, as for the scale bench's swarm (identity check off, no per-certificate stream limit): each costs an RSA key.
  const cert = pki.agent('edge-footprint', 'ipv4=127.0.0.1&host=edge-footprint');
  const tls = { ca: pki.ca.cert, cert: cert.cert, key: cert.key };
  // One link first: what the first link of a process allocates once (pools, code) is not per link.
  startAgent(h, server.agentAddress, { nodeName: 'edge-0', tls, connection: { resumeWindowMs: 10_000 } });
  await waitFor('the first agent to register', () => server.tunnel.registry.agentCount === 1);
  collect();
  const before = process.memoryUsage().arrayBuffers;
  for (let i = 1; i <= links; i++) startAgent(h, server.agentAddress, { nodeName: `edge-${i}`, tls, connection: { resumeWindowMs: 10_000 } });
  await waitFor(`${links} more agents to register`, () => server.tunnel.registry.agentCount === links + 1, 30_000);
  // Idle: the links' setup traffic (settings, session tokens, window updates) is over.
  await waitForSteady('the ArrayBuffer bytes', () => process.memoryUsage().arrayBuffers);
  assert.equal(server.tunnel.sessions.size, links + 1, 'every link holds a resumable session');
  collect();
  const perLink = (process.memoryUsage().arrayBuffers - before) / links;
  // Today 56 bytes (Node's per-session field arrays, a 5-byte frame header, a session secret's hash).
  // A Buffer kept per idle link (a slab, a read or resend buffer made before it is needed) is 1 KiB and up.
  assert.ok(perLink < 512, `an idle link keeps ${perLink.toFixed(0)} bytes of ArrayBuffers (server and agent together); bound 512`);
  t.diagnostic(`ArrayBuffer bytes per idle link, both ends: ${perLink.toFixed(0)}`);
});
