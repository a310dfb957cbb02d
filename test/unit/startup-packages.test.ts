// What the CLIs load, read from a real run's modules (test/support/loaded-packages.ts):
// at start (`--help`: every static import evaluated, then exit), and for the
// whole life of a server and an agent in local mode, connected, then stopped.
// Each package loaded costs RSS in every process for its whole life: the
// Kubernetes client (~75 MB) is for cluster mode only and is imported when that
// mode starts. (prom-client's index, with @opentelemetry/api, tdigest and
// bintrees, is loaded: its private lib/ files are not ours to require.) It is an ES module: only the probe's loader hook sees it.
// node-forge (~1 MB) only makes certificates (pkg/certs/pki.ts): a server
// whose certificates are on disk and an agent given its own never load it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { test } from 'node:test';
import { startLocalTunnel } from '../../hack/local-tunnel.js';
import { ensureLocalServerCertificates, writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { harness } from '../support/harness.js';
import { tempDir } from '../support/tunnel.js';
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

// socks (the SOCKS5 client, pkg/agent/proxy/socks5.ts) only for an agent given a socks5:// proxy.
const NEVER_AT_START = ['@kubernetes/client-node', 'socks'];

function packagesLine(who: string, text: string): string[] {
  const line = /^yt-packages (.*)$/m.exec(text);
  assert.ok(line !== null, `no yt-packages line from the ${who} in: ${text}`);
  return JSON.parse(line[1]!) as string[];
}

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

/** What the processes of a running tunnel need not load: certificates are made before they start. */
const NEVER_RUNNING = [...NEVER_AT_START, 'node-forge'];

test('a server and an agent in local mode, their certificates on disk, never load the Kubernetes client nor node-forge', { timeout: 120_000 }, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const agentDir = join(dir, 'agent');
  // As the bench and a restarted server find them.
  await ensureLocalServerCertificates({ certDir });
  await writeAgentCertificate({ certDir, nodeName: 'packages', nodeIPs: ['127.0.0.1'], outDir: agentDir });
  const output = { server: '', agent: '' };
  const env = process.env.NODE_OPTIONS;
  delete process.env.NODE_OPTIONS;
  t.after(() => {
    if (env !== undefined) process.env.NODE_OPTIONS = env;
  });
  const local = await startLocalTunnel({
    nodeName: 'packages',
    certDir,
    agentDir,
    serverNodeArgs: ['--import', PROBE],
    agentNodeArgs: ['--import', PROBE],
    onOutput: (who, text) => (output[who] += text),
  });
  t.after(() => local.stop());
  // The probe prints when each process exits: after the agent connected, once both are stopped.
  const closed = local.children.map((c) => once(c, 'close'));
  await local.stop();
  await Promise.all(closed);
  for (const who of ['server', 'agent'] as const) {
    const loaded = packagesLine(who, output[who]);
    assert.ok(loaded.includes('winston'), `the probe sees the ${who}'s packages: ${loaded.join(', ')}`);
    assert.deepEqual(
      loaded.filter((p) => NEVER_RUNNING.includes(p)),
      [],
      `the ${who} loaded`,
    );
  }
});
