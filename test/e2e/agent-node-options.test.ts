// The agent's Node.js options (pkg/agent/node-options.ts) reach the agent where
// it is launched: the DaemonSet's NODE_OPTIONS, and hack/local-tunnel (the demo
// and the bench), whose agent reports them in its start line. Losing the option
// in either place gives an agent whose young generation grows to 32 MB
// (2 MB more RSS idle) without any other test noticing.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startLocalTunnel } from '../../hack/local-tunnel.js';
import { AGENT_NODE_OPTIONS } from '../../pkg/agent/node-options.js';
import { manifestNodeOptions } from '../support/manifest-node-options.js';

test('the DaemonSet runs the agent with NODE_OPTIONS set to the agent options', async () => {
  assert.equal(await manifestNodeOptions('agent-daemonset.yaml'), AGENT_NODE_OPTIONS.join(' '));
});

test('an agent started by hack/local-tunnel runs with the agent options and says so', { timeout: 120_000 }, async (t) => {
  let agentText = '';
  const env = process.env.NODE_OPTIONS;
  delete process.env.NODE_OPTIONS;
  t.after(() => {
    if (env !== undefined) process.env.NODE_OPTIONS = env;
  });
  const local = await startLocalTunnel({
    nodeName: 'node-options',
    onOutput: (who, text) => {
      if (who === 'agent') agentText += text;
    },
  });
  t.after(() => local.stop());
  const line = /^.*yurt-tunnel-agent starting.*$/m.exec(agentText);
  assert.ok(line !== null, `the agent's start line, in: ${agentText}`);
  for (const option of AGENT_NODE_OPTIONS) assert.ok(line[0].includes(option), `${option} in: ${line[0]}`);
});
