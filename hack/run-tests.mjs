#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with Node's test
// runner. `npm test` builds first. Extra arguments go to `node --test`
// (e.g. --test-name-pattern=...).
//
// Then it checks the skips. A test may skip only because an external binary
// is missing, with the reason that says how to provide it (the forms below,
// made by hack/konnectivity.ts, hack/cluster/binaries.ts and hack/cluster/requirements.ts); any
// other skip, and any todo, fails the run. `--skips=none` (CI's main run,
// which has every binary) fails on any skip at all. With extra arguments the
// check is off, since a name filter skips tests on purpose.

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The allowed skip reasons: each names a binary, tool or capability the test needs and how to provide it. */
const ALLOWED = [
  {
    kind: 'Konnectivity Go binaries',
    reason: /^needs the Konnectivity Go binaries, not found here: .+ \(set KONNECTIVITY_BIN_DIR to their folder\)$/,
  },
  {
    kind: 'network namespaces',
    reason: /^(network namespaces need (Linux|root) \(.+\)|`ip` \(iproute2\) is not installed|cannot create a network namespace: .+)$/,
  },
  {
    kind: 'system tools',
    reason:
      /^((iptables-nft-save|iptables-legacy-save|iptables|conntrack|setpriv|nsenter|dnsmasq|mmdebstrap|buildah|containerd|runc|umoci|containernetworking-plugins|busybox-static|prometheus|prometheus-node-exporter|curl|promtool|squid|\/usr\/lib\/squid\/basic_ncsa_auth|tinyproxy|danted|openssl|useradd|nginx|haproxy) is|mmdebstrap and buildah are) not installed \(apt-get install [a-z -]+\)$/,
  },
  {
    kind: 'control plane',
    reason:
      /^needs a real control plane, not found here: (kube-apiserver|kube-controller-manager|etcd|kubectl|kube-scheduler|kubelet|kube-proxy)\b.* \((set KUBEBUILDER_ASSETS to their folder|apt-get install etcd-server|put it on PATH or in KUBEBUILDER_ASSETS)\)$/,
  },
];

const root = fileURLToPath(new URL('..', import.meta.url));
const testDir = join(root, 'dist', 'test');

function find(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p);
    return name.endsWith('.test.js') ? [p] : [];
  });
}

const skipsArg = process.argv.slice(2).find((a) => a.startsWith('--skips='));
const skipsMode = skipsArg === undefined ? 'binaries' : skipsArg.slice('--skips='.length);
if (skipsMode !== 'binaries' && skipsMode !== 'none') {
  console.error(`--skips=${skipsMode}: say --skips=binaries (the default) or --skips=none`);
  process.exit(2);
}
const passOn = process.argv.slice(2).filter((a) => a !== skipsArg);

const files = find(testDir).sort();
if (files.length === 0) {
  console.error(`no test files under ${relative(root, testDir)}; run \`npm run build\` first`);
  process.exit(1);
}
const reportDir = mkdtempSync(join(tmpdir(), 'yt-test-outcomes-'));
const report = join(reportDir, 'outcomes.ndjson');
const reporters = [
  `--test-reporter=${process.stdout.isTTY ? 'spec' : 'tap'}`,
  '--test-reporter-destination=stdout',
  `--test-reporter=${join(root, 'hack', 'test-outcomes.mjs')}`,
  `--test-reporter-destination=${report}`,
];
// The runner applies the limit to each file as a whole too: it must not cut short the longest
// limit a test sets itself (real-cluster, 900 s: three routes, life events, a rollout restart;
// it took 664 s on a loaded machine), which it did to churn at 180 s and to real-cluster at 300 s.
// --expose-gc: session-resume's churn test compares live memory before and after.
// Two files at a time (the runner's default here is one per core less one): 376 s against 676 s
// one by one on 2 cores, and every test waits on events, not on fixed times, so it holds.
const args = ['--expose-gc', '--test', '--test-concurrency=2', '--test-timeout=900000', ...reporters, ...passOn, ...files];
const started = Date.now();
const r = spawnSync(process.execPath, args, { stdio: 'inherit', cwd: root });
console.error(`\n${files.length} test files in ${((Date.now() - started) / 1000).toFixed(1)} s`);
const lines = existsSync(report)
  ? readFileSync(report, 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l))
  : [];
rmSync(reportDir, { recursive: true, force: true });
const status = r.status ?? 1;
if (passOn.length > 0) process.exit(status);
process.exit(checkSkips(lines) ? status : status || 1);

/** Prints every skip by reason; false when one is not allowed here. */
function checkSkips(outcomes) {
  const skipped = outcomes.filter((o) => o.skip !== undefined);
  const totals = Object.fromEntries(outcomes.filter((o) => o.total !== undefined).map((o) => [o.total, o.count]));
  const problems = outcomes.filter((o) => o.todo !== undefined).map((o) => `a todo is not a test: ${where(o)}`);
  const byReason = new Map();
  for (const o of skipped) {
    const allowed = typeof o.skip === 'string' && ALLOWED.some((a) => a.reason.test(o.skip));
    if (!allowed) problems.push(`skipped without a missing binary as its reason: ${where(o)} (reason: ${JSON.stringify(o.skip)})`);
    else if (skipsMode === 'none') problems.push(`skipped, though this run must have every binary: ${where(o)}`);
    byReason.set(o.skip, [...(byReason.get(o.skip) ?? []), o]);
  }
  // The runner counts skipped tests (not suites); both counts must agree.
  const skippedTests = skipped.filter((o) => o.kind === 'test').length;
  if (totals.skipped !== skippedTests) problems.push(`the runner counted ${totals.skipped} skipped tests, the report ${skippedTests}`);

  const suites = skipped.length - skippedTests;
  console.error(`skipped: ${plural(skippedTests, 'test')}${suites > 0 ? ` and ${plural(suites, 'suite')}` : ''}`);
  for (const [reason, os] of byReason) {
    const kind = ALLOWED.find((a) => a.reason.test(reason))?.kind ?? 'NOT ALLOWED';
    const inFiles = [...new Set(os.map((o) => relative(root, o.file ?? '')))].join(', ');
    console.error(`  ${os.length} × [${kind}] ${reason}\n      in ${inFiles}`);
  }
  for (const p of problems) console.error(`skip check: ${p}`);
  return problems.length === 0;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function where(o) {
  return `${relative(root, o.file ?? '')}: ${o.kind} "${o.name}"`;
}
