// What the CLIs load, read from a real run's modules (test/support/loaded-packages.ts):
// at start (`--help`: every static import evaluated, then exit), and for the
// whole life of a server and an agent in local mode, connected, then stopped.
// Each package loaded costs RSS in every process for its whole life: the
// Kubernetes client (~75 MB) is for cluster mode only and is imported when that
// mode starts. (prom-client's index, with @opentelemetry/api, tdigest and
// bintrees, is loaded: its private lib/ files are not ours to require.) It is an ES module: only the probe's loader hook sees it.
// node-forge (~1 MB) only makes certificates (pkg/certs/pki.ts): a server
// whose certificates are on disk and an agent given its own never load it.
// Each module loaded also costs start-up time: loading modules is most of
// a CLI's time from start to ready, so what a mode does not use (ws without a
// WebSocket agent, the start-up rehearsal, the iptables room) is imported
// at its first use. The CLIs run here are the bundles that ship (dist/bin):
// there an import() is a chunk of its own, and the probe names the packages
// and modules in each chunk loaded.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { test } from 'node:test';
import { AGENT_BIN, SERVER_BIN, startLocalTunnel } from '../../hack/local-tunnel.js';
import { ensureLocalServerCertificates, writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { harness } from '../support/harness.js';
import { tempDir } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';

const PROBE = join(repoRoot(), 'dist/test/support/loaded-packages.js');

interface Loaded {
  packages: string[];
  /** Our own modules, e.g. pkg/agent/app.js. */
  modules: string[];
}

async function loadedAtStart(cli: 'yurt-tunnel-agent' | 'yurt-tunnel-server'): Promise<Loaded> {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  const child = spawn(process.execPath, ['--import', PROBE, cli === 'yurt-tunnel-server' ? SERVER_BIN : AGENT_BIN, '--help'], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const [code] = (await once(child, 'close')) as [number | null];
  assert.equal(code, 0, stderr);
  return loadedLines('CLI', stderr);
}

// socks (the SOCKS5 client, pkg/agent/proxy/socks5.ts) only for an agent given a socks5:// proxy;
// ws (13 files, with https and zlib) only for a WebSocket: the agent's --transport websocket or
// auto's fallback (pkg/agent/transport-choice.ts), the server's first HTTP/1.1 connection on the
// agent port (pkg/endpoint/ws-arrivals.ts).
const NEVER_AT_START = ['@kubernetes/client-node', 'socks', 'ws'];

/** Our modules for what is off unless asked for: the start-up rehearsal, a WebSocket link, cluster mode's rooms, the agents subcommand. */
const MODULES_NEVER_RUNNING = [
  'pkg/grpc/data-path-rehearsal.js',
  'pkg/agent/rehearsal.js',
  'pkg/server/rehearsal.js',
  'pkg/agent/server-dial-ws.js',
  'pkg/iptables/manager.js',
  'pkg/kube/client.js',
  'pkg/server/cluster.js',
  'pkg/agent/cluster-certificate.js',
];
const MODULES_NEVER_AT_START = [...MODULES_NEVER_RUNNING, 'pkg/meta/agents-status.js'];

function loadedLines(who: string, text: string): Loaded {
  const packages = /^yt-packages (.*)$/m.exec(text);
  const modules = /^yt-modules (.*)$/m.exec(text);
  assert.ok(packages !== null && modules !== null, `no yt-packages and yt-modules lines from the ${who} in: ${text}`);
  return { packages: JSON.parse(packages[1]!) as string[], modules: JSON.parse(modules[1]!) as string[] };
}

for (const cli of ['yurt-tunnel-agent', 'yurt-tunnel-server'] as const) {
  test(`${cli} starts without the packages and modules it does not use`, { timeout: 60_000 }, async () => {
    const { packages, modules } = await loadedAtStart(cli);
    assert.ok(packages.includes('prom-client') && packages.includes('winston'), `the probe sees packages: ${packages.join(', ')}`);
    assert.ok(modules.includes(`cmd/${cli}/main.js`) && modules.includes('pkg/log/logger.js'), `the probe sees our modules: ${modules.join(', ')}`);
    assert.deepEqual(
      packages.filter((p) => NEVER_AT_START.includes(p)),
      [],
    );
    assert.deepEqual(
      modules.filter((m) => MODULES_NEVER_AT_START.includes(m)),
      [],
    );
  });
}

/** What the processes of a running tunnel need not load: certificates are made before they start; the agent speaks gRPC. */
const NEVER_RUNNING = [...NEVER_AT_START, 'node-forge'];

test(
  'a server and an agent in local mode, their certificates on disk, never load the Kubernetes client, node-forge, ws nor the rehearsal',
  { timeout: 120_000 },
  async (t) => {
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
      const { packages, modules } = loadedLines(who, output[who]);
      assert.ok(packages.includes('winston'), `the probe sees the ${who}'s packages: ${packages.join(', ')}`);
      assert.ok(modules.includes('pkg/log/logger.js'), `the probe sees the ${who}'s modules: ${modules.join(', ')}`);
      assert.deepEqual(
        packages.filter((p) => NEVER_RUNNING.includes(p)),
        [],
        `the ${who} loaded`,
      );
      assert.deepEqual(
        modules.filter((m) => MODULES_NEVER_RUNNING.includes(m)),
        [],
        `the ${who} loaded`,
      );
    }
  },
);
