// AgentConnection's watch of a peer that stopped mid-flow, made certain:
// agent-killed.test.ts kills a real agent, and whether node:http2 reads that
// reset varies from kill to kill (without the watch about one kill in two goes
// unnoticed until keepalive); here the agent's path goes dark mid-download (a
// relay that forwards nothing more, not even a close), so the server never
// hears of it by itself. The watch must notice within a look and its 3 s
// check, not when keepalive gives up (10 s of silence, then 20 s for the ping).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { watchEnd } from '../support/processes.js';
import { startAgent, startFirehose, startServer, waitFor } from '../support/tunnel.js';

const MiB = 1024 * 1024;
const RESUME_WINDOW_MS = 2000;
/** The watch's look (250 ms, two of them at worst) and its 3 s check, and room for a loaded machine. */
const NOTICED_MS = 500 + 3000 + 2500;
const SILENT_LINE = 'agent connection fell silent mid-flow and gave no sign of life; closing it';

test('an agent whose path goes dark mid-download is dropped after the flow watch check, not after keepalive', { timeout: 30_000 }, async (t) => {
  const h = harness(t);
  const firehose = await startFirehose(h);
  const server = await startServer(h, { endpoint: { resumeWindowMs: RESUME_WINDOW_MS } });
  const relay = await startBlipRelay(h, [server.endpoint.address.port]);
  const pki = testPKI();
  const cert = pki.agent('edge-1', 'ipv4=127.0.0.1&host=edge-1');
  startAgent(h, `127.0.0.1:${relay.port}`, {
    nodeName: 'edge-1',
    tls: { ca: pki.ca.cert, cert: cert.cert, key: cert.key },
    connection: { resumeWindowMs: RESUME_WINDOW_MS },
  });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

  const download = await server.tunnel.dial(`127.0.0.1:${firehose.port}`);
  h.defer(() => download.destroy());
  const endOf = watchEnd(download);
  let received = 0;
  download.on('data', (c: Buffer) => (received += c.length));
  await waitFor('the download to flow', () => received > 4 * MiB, 10_000);

  relay.freeze();
  const frozenAt = performance.now();
  await waitFor('the server to drop the silent link', () => server.log.find(SILENT_LINE).length > 0, NOTICED_MS + 4000).catch(() => undefined);
  const noticed = server.log.find(SILENT_LINE)[0];
  assert.ok(noticed !== undefined, `no "${SILENT_LINE}" within ${NOTICED_MS + 4000} ms of the path going dark`);
  const noticedAfter = Math.round(noticed.at - frozenAt);
  console.log(`the silent link was dropped ${noticedAfter} ms after its path went dark`);
  assert.ok(noticedAfter < NOTICED_MS, `the silent link was dropped ${noticedAfter} ms after its path went dark`);
  assert.ok(noticedAfter >= 3000, `the agent had its 3 s to show a sign of life (dropped after ${noticedAfter} ms)`);

  // Its session was suspended then: the download fails when the window passes.
  await waitFor('the download to fail', () => endOf() !== undefined, RESUME_WINDOW_MS + 4000);
  const ended = endOf()!;
  assert.equal(ended.how, 'error');
  assert.equal((ended.err as { code?: string }).code, 'YT_ERR_AGENT_LOST');
});
