// Start-up mistakes an operator makes with the built CLIs (issue 35.4): each
// is exit 1 with one line that names the flag, what was given and what to do,
// before the process dials or listens. A run that does not exit by itself (the
// old behaviour: retrying forever) is killed and fails its test.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { harness, type Harness } from '../support/harness.js';
import { testPKI, writePKIFiles } from '../support/pki.js';
import { AGENT_BIN, SERVER_BIN, startProcess } from '../support/processes.js';

const LIMIT = { timeout: 60_000 };
const RUN_TIMEOUT_MS = 15_000;

async function tempDir(h: Harness): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'yt-start-errors-'));
  h.defer(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs a CLI until it exits (killed after RUN_TIMEOUT_MS); its output lines and exit code. */
async function runToExit(h: Harness, bin: string, args: string[]): Promise<{ code: number | string; lines: string[] }> {
  const p = startProcess(h, bin, args, { NODE_NAME: '', NODE_IP: '', NODE_OPTIONS: '' });
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), RUN_TIMEOUT_MS)));
  const code = await Promise.race([p.exited, timedOut]);
  clearTimeout(timer);
  if (code === 'timeout') {
    p.kill('SIGKILL');
    await p.exited;
    assert.fail(`${args.join(' ')}: still running after ${RUN_TIMEOUT_MS} ms; output:\n${p.lines.join('\n')}`);
  }
  return { code, lines: p.lines };
}

/** Exit 1 with exactly one line of output, which matches `re`. */
async function assertRefused(h: Harness, bin: string, args: string[], re: RegExp): Promise<void> {
  const r = await runToExit(h, bin, args);
  assert.equal(r.lines.length, 1, `${args.join(' ')}: ${r.lines.join('\n')}`);
  assert.match(r.lines[0]!, re);
  assert.equal(r.code, 1, r.lines.join('\n'));
}

/** An agent's files from the test CA, written to a temp dir; the flags that name them, and the port nothing listens on. */
async function agentFiles(h: Harness): Promise<{ dir: string; certFile: string; keyFile: string; caFile: string; flags: string[] }> {
  const dir = await tempDir(h);
  const files = await writePKIFiles(dir, testPKI().agent('edge-1'), testPKI().ca);
  const flags = ['--node-name', 'edge-1', '--meta-port', '0', '--startup-rehearsal', 'false', '--tunnelserver-addr', '127.0.0.1:1'];
  return { dir, ...files, flags };
}

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

test('agent --key-file naming a certificate: exit 1 naming the flag, the file and what it holds', LIMIT, async (t) => {
  const h = harness(t);
  const f = await agentFiles(h);
  await assertRefused(
    h,
    AGENT_BIN,
    [...f.flags, '--ca-file', f.caFile, '--cert-file', f.certFile, '--key-file', f.certFile],
    new RegExp(
      `^yurt-tunnel-agent: --key-file: ${escaped(f.certFile)} does not hold a PEM key: it holds a certificate \\(subject .*CN=tunnel-agent-client, issuer CN=yurt-tunnel-test-ca\\) \\(`,
    ),
  );
});

test('agent --cert-file naming a key, --ca-file naming garbage: exit 1 naming the flag and what the file holds', LIMIT, async (t) => {
  const h = harness(t);
  const f = await agentFiles(h);
  const garbage = join(f.dir, 'garbage');
  await writeFile(garbage, 'hello\n');
  await assertRefused(
    h,
    AGENT_BIN,
    [...f.flags, '--ca-file', f.caFile, '--cert-file', f.keyFile, '--key-file', f.keyFile],
    new RegExp(`^yurt-tunnel-agent: --cert-file: ${escaped(f.keyFile)} does not hold a PEM certificate: it holds a private key \\(`),
  );
  await assertRefused(
    h,
    AGENT_BIN,
    [...f.flags, '--ca-file', garbage, '--cert-file', f.certFile, '--key-file', f.keyFile],
    new RegExp(`^yurt-tunnel-agent: --ca-file: ${escaped(garbage)} does not hold a PEM certificate: it holds no PEM block `),
  );
});

test("agent --key-file that is another certificate's key: exit 1 naming both files", LIMIT, async (t) => {
  const h = harness(t);
  const f = await agentFiles(h);
  const otherKey = join(f.dir, 'other.key');
  await writeFile(otherKey, testPKI().server.key);
  await assertRefused(
    h,
    AGENT_BIN,
    [...f.flags, '--ca-file', f.caFile, '--cert-file', f.certFile, '--key-file', otherKey],
    new RegExp(
      `^yurt-tunnel-agent: --key-file: ${escaped(otherKey)} is not the private key of ${escaped(f.certFile)} \\(--cert-file, which holds a certificate .*\\); ` +
        'give the key the certificate was issued for$',
    ),
  );
});

test('agent with its files defaulted from --cert-dir: a wrong one is named by its flag and --cert-dir', LIMIT, async (t) => {
  const h = harness(t);
  const f = await agentFiles(h);
  await writeFile(f.keyFile, testPKI().ca.cert);
  await assertRefused(
    h,
    AGENT_BIN,
    [...f.flags, '--cert-dir', f.dir],
    new RegExp(
      `^yurt-tunnel-agent: --key-file \\(default: in --cert-dir ${escaped(f.dir)}\\): ${escaped(f.keyFile)} does not hold a PEM key: it holds a certificate`,
    ),
  );
});

test('agent --tunnelserver-addr without a port, --apiserver-addr without one: exit 1 naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const f = await agentFiles(h);
  const files = ['--ca-file', f.caFile, '--cert-file', f.certFile, '--key-file', f.keyFile, '--node-name', 'edge-1', '--meta-port', '0'];
  for (const addr of ['127.0.0.1', '127.0.0.1:0', '::1:10262', 'host:port']) {
    await assertRefused(
      h,
      AGENT_BIN,
      [...files, '--tunnelserver-addr', addr],
      new RegExp(
        `^error: option '--tunnelserver-addr <host:port,...>' argument '${escaped(addr)}' is invalid\\. --tunnelserver-addr: "${escaped(addr)}" is not host:port with a port 1-65535, e\\.g\\. `,
      ),
    );
  }
  // In a list of servers, the entry that is wrong is named.
  await assertRefused(
    h,
    AGENT_BIN,
    [...files, '--tunnelserver-addr', '127.0.0.1:10262, 127.0.0.2'],
    /^error: option '--tunnelserver-addr <host:port,...>' argument '127\.0\.0\.1:10262, 127\.0\.0\.2' is invalid\. --tunnelserver-addr: "127\.0\.0\.2" is not host:port/,
  );
  await assertRefused(
    h,
    AGENT_BIN,
    [...files, '--apiserver-addr', '10.0.0.1'],
    /^error: option '--apiserver-addr <host:port>' argument '10\.0\.0\.1' is invalid\. not host:port or an https:\/\/ URL/,
  );
});

test('server agents --meta-addr without a port: exit 1 naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  await assertRefused(
    h,
    SERVER_BIN,
    ['agents', '--meta-addr', '127.0.0.1'],
    /^error: option '--meta-addr <host:port>' argument '127\.0\.0\.1' is invalid\. not host:port/,
  );
});

// ----- duration flags: the unit rule in --help, 0 refused where it means nothing, and no absurd values

/** Duration flags whose 0 means something (said in --help); every other duration flag refuses 0. */
const MEANINGFUL_ZERO = new Set(['--resume-window', '--server-probe-interval', '--drain-timeout', '--half-closed-linger', '--graceful-shutdown-timeout']);

/** The `<duration>` flags --help lists, each with its help text on one line. */
async function durationFlags(h: Harness, bin: string): Promise<Array<{ flag: string; help: string }>> {
  const r = await runToExit(h, bin, ['--help']);
  assert.equal(r.code, 0);
  const text = r.lines.join('\n');
  // Each option starts on a line indented by two spaces with its flags; its description runs until the next one.
  const parts = text.split(/\n(?= {2}(?:-\w, )?--)/);
  return parts.flatMap((part) => {
    const m = /^ {2}(?:-\w, )?(--[\w-]+) <duration>/.exec(part);
    return m === null ? [] : [{ flag: m[1]!, help: part.replace(/\s+/g, ' ') }];
  });
}

for (const [name, bin] of [
  ['server', SERVER_BIN],
  ['agent', AGENT_BIN],
] as const) {
  test(`${name}: every duration flag says the unit rule and its range in --help`, LIMIT, async (t) => {
    const h = harness(t);
    const flags = await durationFlags(h, bin);
    assert.ok(flags.length >= (name === 'server' ? 12 : 8), flags.map((f) => f.flag).join(' '));
    for (const { flag, help } of flags) {
      assert.match(help, /a duration such as 500ms, 10s, 1m30s, 2h; a bare number is seconds; \d+(ms|s|m|h) to \d+(ms|s|m|h)/, flag);
      assert.equal(help.includes(', or 0 ('), MEANINGFUL_ZERO.has(flag), `${flag}: 0 said to mean something exactly where it does`);
    }
  });

  test(`${name}: every duration flag refuses 0 (where it means nothing), a negative and an absurd value, saying its range`, LIMIT, async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    // Whatever got past its flag would stop at the missing files, never listen or dial.
    const base =
      name === 'server'
        ? [
            '--bind-address',
            '127.0.0.1',
            '--cert-dir',
            join(dir, 'pki'),
            '--interceptor-proxier-uds',
            join(dir, 'p.sock'),
            '--client-ca-file',
            join(dir, 'absent'),
          ]
        : ['--node-name', 'edge-1', '--tunnelserver-addr', '127.0.0.1:1', '--cert-dir', dir, '--meta-port', '0'];
    for (const { flag } of await durationFlags(h, bin)) {
      const values = ['1000h', ...(MEANINGFUL_ZERO.has(flag) ? [] : ['0'])];
      for (const value of values) {
        await assertRefused(
          h,
          bin,
          [...base, flag, value],
          new RegExp(
            `^error: option '${flag} <duration>' argument '${value}' is invalid\\. out of range: use \\d+(ms|s|m|h) to \\d+(ms|s|m|h)(, or 0 \\([^)]+\\))? \\(got "${value}"\\)$`,
          ),
        );
      }
    }
    await assertRefused(
      h,
      bin,
      [...base, '--dial-timeout', '-1s'],
      /^error: option '--dial-timeout <duration>' argument '-1s' is invalid\. cannot be negative: use 1ms to 10m \(got "-1s"\)$/,
    );
  });
}

/** A loopback TCP port something else already listens on, for the run of the test. */
async function busyPort(h: Harness): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  h.defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

test('a port another process holds: exit 1 naming the flag, the address and what to do', LIMIT, async (t) => {
  const h = harness(t);
  const port = await busyPort(h);
  const inUse = (flag: string): RegExp => new RegExp(`${escaped(`${flag} 127.0.0.1:${port}`)}: address already in use: .*choose another port`);

  const a = await agentFiles(h);
  const agentArgs = [...a.flags.filter((f, i, all) => f !== '--meta-port' && all[i - 1] !== '--meta-port'), '--meta-port', String(port)];
  const agent = await runToExit(h, AGENT_BIN, [...agentArgs, '--ca-file', a.caFile, '--cert-file', a.certFile, '--key-file', a.keyFile]);
  assert.equal(agent.code, 1, agent.lines.join('\n'));
  assert.match(agent.lines.at(-1)!, inUse('--meta-port'));

  const certDir = await tempDir(h);
  const server = await runToExit(h, SERVER_BIN, [
    '--cert-dir',
    certDir,
    '--bind-address',
    '127.0.0.1',
    '--startup-rehearsal',
    'false',
    '--tunnel-agent-connect-port',
    '0',
    '--insecure-port',
    '0',
    '--meta-port',
    '0',
    '--interceptor-proxier-uds',
    join(certDir, 'yt.sock'),
    '--secure-port',
    String(port),
  ]);
  assert.equal(server.code, 1, server.lines.join('\n'));
  assert.match(server.lines.at(-1)!, inUse('--secure-port'));
});

test('agent --proxy-url with another scheme, or an unreadable --proxy-credentials-file or --proxy-ca-file: exit 1 naming the flag', LIMIT, async (t) => {
  const h = harness(t);
  const files = await agentFiles(h);
  const tls = ['--ca-file', files.caFile, '--cert-file', files.certFile, '--key-file', files.keyFile];
  await assertRefused(
    h,
    AGENT_BIN,
    [...files.flags, ...tls, '--proxy-url', 'ftp://user:secret@proxy.example:21'],
    /^yurt-tunnel-agent: --proxy-url: proxy scheme "ftp:" is not supported; use http:\/\/, https:\/\/, socks5:\/\/ or socks5h:\/\/$/,
  );
  const missing = join(files.dir, 'no-such-credentials');
  await assertRefused(
    h,
    AGENT_BIN,
    [...files.flags, ...tls, '--proxy-url', 'http://proxy.example:3128', '--proxy-credentials-file', missing],
    new RegExp(`^yurt-tunnel-agent: --proxy-credentials-file: cannot read ${escaped(missing)}: ENOENT`),
  );
  const missingCA = join(files.dir, 'no-such-proxy-ca.crt');
  await assertRefused(
    h,
    AGENT_BIN,
    [...files.flags, ...tls, '--proxy-url', 'https://proxy.example:3129', '--proxy-ca-file', missingCA],
    new RegExp(`^yurt-tunnel-agent: --proxy-ca-file: cannot read ${escaped(missingCA)}: ENOENT`),
  );
});
