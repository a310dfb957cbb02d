// What the CLIs load at start, read from the module cache of a real run
// (`--help`: every static import evaluated, then exit). Each package loaded
// costs RSS in every process for its whole life (bench/README.md, "Memory"):
// prom-client's index would bring its default process metrics with
// @opentelemetry/api, Summary's tdigest and bintrees; the Kubernetes client
// (~75 MB) is for cluster mode only and is imported when that mode starts.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../support/upstream.js';

const PROBE = join(repoRoot(), 'dist/test/support/loaded-packages.js');

async function packagesAtStart(cli: 'yurt-tunnel-agent' | 'yurt-tunnel-server'): Promise<string[]> {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  const child = spawn(process.execPath, ['--import', PROBE, join(repoRoot(), `dist/cmd/${cli}/main.js`), '--help'], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  assert.equal(code, 0, stderr);
  const line = /^yt-packages (.*)$/m.exec(stderr);
  assert.ok(line !== null, `no yt-packages line in: ${stderr}`);
  return JSON.parse(line[1]!) as string[];
}

const NEVER_AT_START = ['@kubernetes/client-node', '@opentelemetry/api', 'tdigest', 'bintrees'];

for (const cli of ['yurt-tunnel-agent', 'yurt-tunnel-server'] as const) {
  test(`${cli} starts without the packages it does not use`, { timeout: 60_000 }, async () => {
    const loaded = await packagesAtStart(cli);
    assert.ok(loaded.includes('prom-client') && loaded.includes('winston'), `the probe sees packages: ${loaded.join(', ')}`);
    assert.deepEqual(
      loaded.filter((p) => NEVER_AT_START.includes(p)),
      [],
    );
  });
}
