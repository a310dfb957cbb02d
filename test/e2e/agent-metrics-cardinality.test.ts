// The server's metrics do not grow with its agents: no series is labelled by
// agent, so 1,000 idle agents cost the metrics registry what one does.
// Checked on the tunnel and the agent endpoint sharing one registry, as in
// the server.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Registry } from '../../pkg/metrics/prom.js';
import { harness } from '../support/harness.js';
import { connectVia, readExactly, startAgent, startEchoServer, startServer, waitFor } from '../support/tunnel.js';

/** How long an agent may take to register: in the full suite, beside the churn test, once more than 5 s. */
const REGISTERS_MS = 15_000;

/** Every series in the registry, as `name{label="value",…}`. */
async function series(registry: Registry): Promise<Set<string>> {
  const out = new Set<string>();
  for (const m of await registry.getMetricsAsJSON()) {
    for (const v of m.values as Array<{ metricName?: string; labels: Record<string, unknown> }>) {
      const labels = Object.entries(v.labels)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, x]) => `${k}="${String(x)}"`)
        .join(',');
      out.add(`${v.metricName ?? m.name}{${labels}}`);
    }
  }
  return out;
}

test('agents connecting and carrying a connection add no metric series', async (t) => {
  const h = harness(t);
  const registry = new Registry();
  const server = await startServer(h, { tunnel: { metricsRegistry: registry }, endpoint: { metricsRegistry: registry } });
  const echo = await startEchoServer(h);
  const agents = ['edge-1', 'edge-2', 'edge-3'];
  const closed = async (): Promise<number> =>
    (await registry.getSingleMetric('yurttunnel_server_connections_closed_total')!.get()).values.reduce((n, v) => n + v.value, 0);
  // One connection through an agent, closed by the caller: every per-link path runs.
  const use = async (agent: string): Promise<void> => {
    const before = await closed();
    const open = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': agent } });
    assert.equal(open.status, 200);
    open.socket.write('ping');
    assert.equal((await readExactly(open.socket, 4, open.rest)).toString(), 'ping');
    open.socket.destroy();
    for (let tries = 0; (await closed()) === before; tries++) {
      assert.ok(tries < 1000, 'the server counts the connection closed');
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  startAgent(h, server.agentAddress, { nodeName: agents[0]!, identifiers: `ipv4=127.0.0.1&host=${agents[0]}` });
  await waitFor('the first agent', () => server.tunnel.registry.agentCount === 1, REGISTERS_MS);
  await use(agents[0]!);
  const withOne = await series(registry);

  for (const [i, agent] of agents.slice(1).entries()) {
    startAgent(h, server.agentAddress, { nodeName: agent, identifiers: `ipv4=127.0.0.1&host=${agent}` });
    await waitFor(`agent ${agent}`, () => server.tunnel.registry.agentCount === i + 2, REGISTERS_MS);
    await use(agent);
  }
  const withThree = await series(registry);
  const labelledByAgent = [...withThree].filter((s) => agents.some((a) => s.includes(a)));
  assert.deepEqual(labelledByAgent, [], 'no series names an agent');
  assert.deepEqual(
    [...withThree].filter((s) => !withOne.has(s)),
    [],
    'two more agents add no series',
  );
});
