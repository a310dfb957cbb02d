// The built CLIs as an operator meets them: --help lists the main flags,
// --version prints the package version, a bad value exits non-zero with one
// line on stderr naming the flag, and issue-agent-cert writes an agent's files.
// Nothing long-running is started here: every run is expected to exit by itself.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ensureLocalServerCertificates } from '../../pkg/certs/local-store.js';
import { describeCertificate } from '../../pkg/certs/read-certificate.js';
import { AGENT_BIN as AGENT, SERVER_BIN as SERVER } from '../support/processes.js';
import { harness, type Harness } from '../support/harness.js';
import { repoRoot } from '../support/upstream.js';

const LIMIT = { timeout: 60_000 };
/** A run that has not exited by then is killed and fails its test. */
const RUN_TIMEOUT_MS = 15_000;

const VERSION = (JSON.parse(await readFile(join(repoRoot(), 'package.json'), 'utf8')) as { version: string }).version;

interface RunResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs a CLI to completion with stdout and stderr kept apart; env without the agent's/server's env fallbacks. */
function run(h: Harness, bin: string, args: string[]): Promise<RunResult> {
  const env = { ...process.env };
  for (const k of ['NODE_NAME', 'NODE_IP', 'PROXY_SERVER_ID', 'NODE_OPTIONS']) delete env[k];
  const child = spawn(process.execPath, [bin, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  h.defer(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (c: Buffer) => out.push(c));
  child.stderr.on('data', (c: Buffer) => err.push(c));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${bin} ${args.join(' ')} did not exit within ${RUN_TIMEOUT_MS} ms; stderr: ${Buffer.concat(err).toString()}`));
    }, RUN_TIMEOUT_MS);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    // 'close' comes after both pipes are drained.
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
  });
}

async function tempDir(h: Harness): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'yt-cli-'));
  h.defer(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Server flags that keep a wrongly accepted run off real ports and paths. */
async function safeServerFlags(h: Harness): Promise<string[]> {
  const dir = await tempDir(h);
  return ['--bind-address', '127.0.0.1', '--cert-dir', join(dir, 'pki'), '--interceptor-proxier-uds', join(dir, 'proxier.sock')];
}

/** Agent flags that pass validation up to the one under test, with certificate paths that do not exist. */
async function baseAgentFlags(h: Harness): Promise<string[]> {
  const dir = await tempDir(h);
  return [
    '--node-name',
    'edge-1',
    '--ca-file',
    join(dir, 'ca.crt'),
    '--cert-file',
    join(dir, 'tls.crt'),
    '--key-file',
    join(dir, 'tls.key'),
    '--meta-port',
    '0',
  ];
}

/** Exit 1, nothing on stdout, exactly `line` (one line) on stderr. */
function assertRefused(r: RunResult, line: string): void {
  assert.equal(r.stderr, line + '\n', `stderr: ${JSON.stringify(r.stderr)}`);
  assert.equal(r.code, 1);
  assert.equal(r.stdout, '');
}

const SERVER_FLAGS = [
  '--bind-address',
  '--tls-handshake-timeout',
  '--request-head-timeout',
  '--connect-head-timeout',
  '--max-pending-dials-per-agent',
  '--max-unknown-packets-per-agent',
  '--tunnel-agent-connect-port',
  '--interceptor-proxier-uds',
  '--proxy-strategy',
  '--dial-timeout',
  '--server-count',
  '--max-agent-streams',
  '--resume-window',
  '--resume-memory-budget',
  '--cert-dir',
  '--cert-ips',
  '--cert-dns-names',
  '--egress-selector-enable',
  '--enable-iptables',
  '--iptables-sync-period',
  '--egress-selector-uds',
  '--egress-selector-mode',
  '--egress-direct-dial',
  '--meta-port',
  '--enable-profiling',
  '--startup-rehearsal',
  '--graceful-shutdown-timeout',
  '--max-agent-connect-rate',
  '--half-closed-linger',
  '--enable-dns-controller',
  '--dns-sync-period',
  '--v',
];

const AGENT_FLAGS = [
  '--resume-window',
  '--node-name',
  '--max-concurrent-dials',
  '--node-ip',
  '--tunnelserver-addr',
  '--ca-file',
  '--cert-file',
  '--key-file',
  '--agent-identifiers',
  '--allowed-destinations',
  '--cert-dir',
  '--kube-config',
  '--apiserver-addr',
  '--meta-host',
  '--meta-port',
  '--server-probe-interval',
  '--enable-profiling',
  '--startup-rehearsal',
  '--dial-timeout',
];

test('yurt-tunnel-server --help exits 0 and lists every main flag', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, ['--help']);
  assert.equal(r.code, 0);
  assert.equal(r.stderr, '');
  assert.match(r.stdout, /^Usage: yurt-tunnel-server /);
  for (const flag of SERVER_FLAGS) assert.match(r.stdout, new RegExp(`(^|[\\s,])${flag}[ ,\\n]`), flag);
  assert.match(r.stdout, /issue-agent-cert/);
});

test('yurt-tunnel-agent --help exits 0 and lists every main flag', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, AGENT, ['--help']);
  assert.equal(r.code, 0);
  assert.equal(r.stderr, '');
  assert.match(r.stdout, /^Usage: yurt-tunnel-agent /);
  for (const flag of AGENT_FLAGS) assert.match(r.stdout, new RegExp(`(^|[\\s,])${flag}[ ,\\n]`), flag);
});

test('yurt-tunnel-server issue-agent-cert --help lists its own flags', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, ['issue-agent-cert', '--help']);
  assert.equal(r.code, 0);
  for (const flag of ['--node-name', '--out', '--cert-dir', '--node-ip']) assert.match(r.stdout, new RegExp(`\\s${flag} `), flag);
});

test('--version prints the package.json version on both CLIs', LIMIT, async (t) => {
  const h = harness(t);
  for (const bin of [SERVER, AGENT]) {
    const r = await run(h, bin, ['--version']);
    assert.equal(r.code, 0, bin);
    assert.equal(r.stdout, `${VERSION}\n`, bin);
    assert.equal(r.stderr, '', bin);
  }
});

test('server --dial-timeout soon: exit 1, one line naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, [...(await safeServerFlags(h)), '--dial-timeout', 'soon']);
  assertRefused(r, `error: option '--dial-timeout <duration>' argument 'soon' is invalid. not a duration: use e.g. 10s, 500ms, 1m (got "soon")`);
});

test('server --proxy-strategy nearest: exit 1, one line naming the flag and the choices', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, [...(await safeServerFlags(h)), '--proxy-strategy', 'nearest']);
  assertRefused(
    r,
    `error: option '--proxy-strategy <list>' argument 'nearest' is invalid. unknown proxy strategy "nearest"; use a comma list of: destHost, default, defaultRoute`,
  );
});

test('server --egress-direct-dial always: exit 1, one line naming the flag and the choices', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, [...(await safeServerFlags(h)), '--egress-direct-dial', 'always']);
  assertRefused(r, `error: option '--egress-direct-dial <mode>' argument 'always' is invalid. not one of auto, off (got "always")`);
});

test('server --tunnel-agent-connect-port 70000: exit 1, one line naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, SERVER, [...(await safeServerFlags(h)), '--tunnel-agent-connect-port', '70000']);
  assertRefused(r, `error: option '--tunnel-agent-connect-port <port>' argument '70000' is invalid. not a port number 0-65535 (got "70000")`);
});

test(
  'server --cert-ips with a name, --server-count 0, --v high, --bind-address everywhere, zero timeouts and limits: each one line naming its flag',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const safe = await safeServerFlags(h);
    const cases: Array<[string[], string]> = [
      [['--cert-ips', '10.0.0.1,tunnel.example'], '--cert-ips'],
      [['--server-count', '0'], '--server-count'],
      [['--v', 'high'], '--v'],
      [['--bind-address', 'everywhere'], '--bind-address'],
      [['--tls-handshake-timeout', '0'], '--tls-handshake-timeout'],
      [['--request-head-timeout', '0s'], '--request-head-timeout'],
      [['--connect-head-timeout', 'soon'], '--connect-head-timeout'],
      [['--max-pending-dials-per-agent', '0'], '--max-pending-dials-per-agent'],
      [['--max-unknown-packets-per-agent', '-1'], '--max-unknown-packets-per-agent'],
      [['--resume-memory-budget', '0'], '--resume-memory-budget'],
    ];
    for (const [args, flag] of cases) {
      const r = await run(h, SERVER, [...safe, '--tunnel-agent-connect-port', '0', ...args]);
      assert.equal(r.code, 1, args.join(' '));
      assert.equal(r.stdout, '');
      const lines = r.stderr.split('\n').filter((l) => l !== '');
      assert.equal(lines.length, 1, `${args.join(' ')}: ${r.stderr}`);
      assert.match(lines[0]!, new RegExp(`^error: option '(-v, )?${flag} <`), args.join(' '));
    }
  },
);

test('agent --allowed-destinations 10.0.0.0/99: exit 1, one line naming the flag and the entry', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, AGENT, [...(await baseAgentFlags(h)), '--tunnelserver-addr', '127.0.0.1:1', '--allowed-destinations', '10.0.0.0/99']);
  assertRefused(
    r,
    'yurt-tunnel-agent: --allowed-destinations entry "10.0.0.0/99" has a prefix length outside 0-32; use CIDR, CIDR:port, [IPv6-CIDR]:port or *',
  );
});

test('agent without --tunnelserver-addr and without a cluster: exit 1, one line saying it is required and where it is found otherwise', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, AGENT, await baseAgentFlags(h));
  assertRefused(
    r,
    "yurt-tunnel-agent: --tunnelserver-addr is required when no cluster is configured (host:port of yurt-tunnel-server's agent port, 10262); " +
      "with --kube-config, --apiserver-addr or the kubelet's kubeconfig the agent finds it from Service kube-system/x-tunnel-server-svc",
  );
});

test('agent --agent-identifiers zone=a: exit 1, one line naming the unknown key', LIMIT, async (t) => {
  const h = harness(t);
  const r = await run(h, AGENT, [...(await baseAgentFlags(h)), '--tunnelserver-addr', '127.0.0.1:1', '--agent-identifiers', 'zone=a']);
  assertRefused(
    r,
    'yurt-tunnel-agent: --agent-identifiers has unknown key "zone"; known keys: ipv4, ipv6, host, cidr, default-route (e.g. ipv4=10.0.0.5&host=node1)',
  );
});

test('agent --dial-timeout soon, --resume-window 50ms and --node-ip node1: one line naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const base = [...(await baseAgentFlags(h)), '--tunnelserver-addr', '127.0.0.1:1'];
  assertRefused(
    await run(h, AGENT, [...base, '--dial-timeout', 'soon']),
    `error: option '--dial-timeout <duration>' argument 'soon' is invalid. not a duration: use e.g. 10s, 500ms, 1m (got "soon")`,
  );
  assertRefused(
    await run(h, AGENT, [...base, '--resume-window', '50ms']),
    `error: option '--resume-window <duration>' argument '50ms' is invalid. out of range: use 100ms to 10m, or 0 (off) (got "50ms")`,
  );
  assertRefused(
    await run(h, AGENT, [...base, '--node-ip', 'node1']),
    `error: option '--node-ip <ip>' argument 'node1' is invalid. not an IP address (got "node1")`,
  );
});

test('issue-agent-cert writes ca.crt, tls.crt and tls.key from the local CA made by the server', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const out = join(dir, 'agent');
  const local = await ensureLocalServerCertificates({ certDir });
  const r = await run(h, SERVER, ['issue-agent-cert', '--node-name', 'edge-7', '--out', out, '--cert-dir', certDir, '--node-ip', '10.0.0.7']);
  assert.equal(r.stderr, '');
  assert.equal(r.code, 0);
  assert.equal(r.stdout, `wrote ${join(out, 'ca.crt')}, ${join(out, 'tls.crt')}, ${join(out, 'tls.key')}\n`);

  assert.equal(await readFile(join(out, 'ca.crt'), 'utf8'), local.ca);
  assert.equal((await stat(join(out, 'tls.key'))).mode & 0o777, 0o600);
  const cert = await readFile(join(out, 'tls.crt'), 'utf8');
  assert.equal(new X509Certificate(cert).verify(new X509Certificate(local.ca).publicKey), true);
  const d = describeCertificate(cert);
  assert.equal(d.commonName, 'tunnel-agent-client');
  assert.deepEqual(d.organizations, ['openyurt:yurttunnel']);
  assert.deepEqual(d.dnsNames, ['edge-7']);
  assert.deepEqual(d.ips, ['10.0.0.7']);
});

test('issue-agent-cert without a CA in --cert-dir: exit 1, one line saying where the CA should be', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const r = await run(h, SERVER, ['issue-agent-cert', '--node-name', 'edge-7', '--out', join(dir, 'agent'), '--cert-dir', certDir]);
  assertRefused(
    r,
    `yurt-tunnel-server: no CA in ${certDir} (ca.crt, ca.key); start yurt-tunnel-server with --cert-dir ${certDir} once, ` +
      "or point --cert-dir at the server's certificate directory",
  );
  await assert.rejects(stat(join(dir, 'agent')), { code: 'ENOENT' });
});

test('issue-agent-cert without --node-name: exit 1, one line naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const r = await run(h, SERVER, ['issue-agent-cert', '--out', join(dir, 'agent'), '--cert-dir', dir]);
  assertRefused(r, "error: required option '--node-name <name>' not specified");
});
