// The server's Node.js options (pkg/server/node-options.ts) reach the server
// where it is launched: the Deployment's NODE_OPTIONS, and hack/local-tunnel
// (the demo, the tests and the bench). Losing the option in either place gives
// a server whose young generation grows to 32 MB (RSS at ready 71 -> 79 MB)
// without any other test noticing.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { startLocalTunnel } from '../../hack/local-tunnel.js';
import { SERVER_NODE_OPTIONS } from '../../pkg/server/node-options.js';
import { manifestNodeOptions } from '../support/manifest-node-options.js';

test('the Deployment runs the server with NODE_OPTIONS set to the server options', async () => {
  assert.equal(await manifestNodeOptions('server-deployment.yaml'), SERVER_NODE_OPTIONS.join(' '));
});

test('a server started by hack/local-tunnel runs with the server options', { timeout: 120_000 }, async (t) => {
  const local = await startLocalTunnel({ agent: false });
  t.after(() => local.stop());
  const argv = (await readFile(`/proc/${local.children[0]!.pid!}/cmdline`, 'utf8')).split('\0');
  const script = argv.findIndex((a) => a.endsWith('yurt-tunnel-server/main.js'));
  assert.ok(script > 0, `the server's command line: ${argv.join(' ')}`);
  for (const option of SERVER_NODE_OPTIONS) assert.ok(argv.slice(0, script).includes(option), `${option} before the script in: ${argv.join(' ')}`);
});
