// A reconnect storm: 200 agents redial a restarted server at once. The
// server admits them at its connect rate, refuses the excess with a retryable
// status, and every agent is back (with full-jitter backoff) within 30 s.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freeLowPort } from '../../hack/ports.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { startAgent, startServer, waitFor, type TestAgent } from '../support/tunnel.js';

const AGENTS = 200;
const RATE = 20;

test(`${AGENTS} agents reconnecting after a server restart are admitted at the connect rate and all come back within 30 s`, { timeout: 120_000 }, async (t) => {
  const h = harness(t);
  const pki = testPKI();
  // One certificate for all (the storm is about admission, not identity).
  const shared = pki.agent('storm');
  const endpoint = { identityCheck: 'none' as const, maxStreamsPerAgent: 10 * AGENTS };
  // The first start admits everyone at once; the restart is the storm.
  // Below the ephemeral range: no listener on port 0 elsewhere can take it while the server is down.
  const port = await freeLowPort();
  let server = await startServer(h, { endpoint: { ...endpoint, maxConnectRate: 0 }, port });
  const agents: TestAgent[] = [];
  // Stopped together (the harness would stop them one after another).
  h.defer(() => Promise.all(agents.map((a) => a.stop())));
  for (let i = 0; i < AGENTS; i++) {
    agents.push(
      startAgent(h, server.agentAddress, { nodeName: `storm-${i}`, tls: { ca: pki.ca.cert, cert: shared.cert, key: shared.key }, syncIntervalMs: 500 }),
    );
  }
  const t0 = performance.now();
  await waitFor('every agent to connect', () => server.tunnel.registry.agentCount === AGENTS, 60_000);
  t.diagnostic(`initial connect ${Math.round(performance.now() - t0)} ms`);

  const t1 = performance.now();
  await server.stop();
  t.diagnostic(`stop ${Math.round(performance.now() - t1)} ms`);
  const restartedAt = performance.now();
  server = await startServer(h, { endpoint: { ...endpoint, maxConnectRate: RATE }, port });
  // Admissions per second, sampled every 50 ms.
  const samples: { at: number; count: number }[] = [];
  await waitFor(
    'every agent to come back',
    () => {
      samples.push({ at: performance.now(), count: server.tunnel.registry.agentCount });
      return server.tunnel.registry.agentCount === AGENTS;
    },
    30_000,
  );
  const tookMs = performance.now() - restartedAt;
  let worstSecond = 0;
  for (const s of samples) {
    const later = samples.filter((x) => x.at > s.at && x.at <= s.at + 1000);
    const last = later[later.length - 1];
    if (last !== undefined) worstSecond = Math.max(worstSecond, last.count - s.count);
  }
  t.diagnostic(
    `all ${AGENTS} back in ${Math.round(tookMs)} ms; most admitted in one second: ${worstSecond}; refused: ${server.endpoint.refusals.connect_rate}`,
  );
  // The bucket holds 2×RATE and refills RATE per second (one sample period of slack).
  assert.ok(worstSecond <= 3 * RATE + 5, `admitted ${worstSecond} in one second (limit ${RATE}/s, burst ${2 * RATE})`);
  assert.ok(server.endpoint.refusals.connect_rate > 0, 'the excess was refused');
  assert.ok(tookMs < 30_000);
  const t2 = performance.now();
  await Promise.all(agents.map((a) => a.stop()));
  t.diagnostic(`agents stopped in ${Math.round(performance.now() - t2)} ms`);
  const t3 = performance.now();
  await server.stop();
  t.diagnostic(`server stopped in ${Math.round(performance.now() - t3)} ms`);
});
