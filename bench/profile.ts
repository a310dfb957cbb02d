// npm run bench:profile -- [cold|bulk|rtt|conn|rate ...] [--pair ours|ours-noresume|go-agent] [--out DIR] [--perf]
//                           [--node-args "--trace-deopt ..."]  (BENCH_LOG=FILE keeps what server and agent print in FILE.server, FILE.agent)
//
// Where our server's and agent's time goes, phase by phase, under the same
// client and target as npm run bench. Both processes run with bench/loop-probe
// loaded; around each phase the driver signals them (SIGUSR2) to profile it,
// and prints for each: CPU used, event-loop delay, GC pauses by kind, and the
// CPU profile's self time by kind and by function. The .cpuprofile files stay
// in --out (default bench/results/profiles/) for Chrome DevTools. With --perf,
// `perf record` (cpu-clock) also samples both processes during each phase and
// the report shows where their CPU went, kernel included (the V8 profile counts
// wall time, which on a busy machine includes time the process was preempted);
// the V8 profile is then left out, as the two distort each other.
//   cold  the first 2,000 round trips after the processes start (before any warm-up)
//   bulk  1 GiB target → client
//   flows 4 × 64 MiB target → client at once (as the bench's fairness row)
//   rtt   20,000 1-byte round trips
//   conn  2,000 new connections one after another (CONNECT → 200 → echo, target closes)
//   rate  4,000 new connections, 8 at once
//   paced 200 new connections a second for 10 s, started on schedule (open loop)

import { appendFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { REPO_ROOT } from '../hack/local-tunnel.js';
import { ClientProcess } from './client-process.js';
import { formatSummary, summarizeProfile } from './cpuprofile-summary.js';
import type { BenchPath } from './lean-conn.js';
import { startPair, type Pair, type PairName } from './pairs.js';
import { percentile } from './stats.js';
import { prepareOnePair, runBench, stopOnePair } from './bench-main.js';

const MiB = 1024 * 1024;
const PHASES = ['cold', 'bulk', 'flows', 'rtt', 'conn', 'rate', 'paced'] as const;
type Phase = (typeof PHASES)[number];

interface ProbeReport {
  name: string;
  file: string;
  loopDelay: { p50: number; p99: number; max: number; mean: number };
  gc: Record<string, { count: number; ms: number; maxMs: number }>;
  cpu: { user: number; system: number };
}

/** Follows the probe lines our processes print. */
class ProbeLines {
  private partial = '';
  readonly reports: ProbeReport[] = [];
  onText = (text: string): void => {
    const lines = (this.partial + text).split('\n');
    this.partial = lines.pop()!;
    for (const l of lines) {
      const i = l.indexOf('yt-probe ');
      if (i >= 0) this.reports.push(JSON.parse(l.slice(i + 9)) as ProbeReport);
    }
  };
}

async function toggle(pair: Pair, probes: ProbeLines, expectReports: boolean): Promise<ProbeReport[]> {
  const before = probes.reports.length;
  process.kill(pair.serverPid, 'SIGUSR2');
  process.kill(pair.agentPid, 'SIGUSR2');
  if (!expectReports) {
    await sleep(100);
    return [];
  }
  for (let i = 0; i < 200 && probes.reports.length < before + 2; i++) await sleep(50);
  return probes.reports.slice(before);
}

async function runPhase(client: ClientProcess, path: BenchPath, phase: Phase): Promise<string> {
  switch (phase) {
    case 'cold':
    case 'rtt': {
      const r = await client.call({ op: 'rtt', path, rounds: phase === 'cold' ? 2000 : 20_000 });
      return `RTT p50 ${percentile(r, 50).toFixed(0)} µs, p99 ${percentile(r, 99).toFixed(0)} µs, max ${Math.max(...r).toFixed(0)} µs`;
    }
    case 'bulk': {
      const r = await client.call({ op: 'bulk', path, bytes: 1024 * MiB });
      return `${(r.bytes / r.seconds / MiB).toFixed(0)} MiB/s`;
    }
    case 'flows': {
      const r = await client.call({ op: 'parallel', path, flows: 4, bytes: 64 * MiB });
      return `${(r.bytes / r.seconds / MiB).toFixed(0)} MiB/s, shares ${r.shares.map((x) => (x * 100).toFixed(0)).join('/')} %`;
    }
    case 'conn': {
      const c = await client.call({ op: 'connections', path, rounds: 2000 });
      return `new connection p50 ${percentile(c, 50).toFixed(3)} ms, p99 ${percentile(c, 99).toFixed(3)} ms`;
    }
    case 'paced': {
      const r = await client.call({ op: 'paced', path, perSecond: 200, seconds: 10 });
      return `dial p50 ${percentile(r.dialMs, 50).toFixed(2)} ms, p99 ${percentile(r.dialMs, 99).toFixed(2)} ms, max ${Math.max(...r.dialMs).toFixed(1)} ms; echo p50 ${percentile(r.echoMs, 50).toFixed(2)} ms, p99 ${percentile(r.echoMs, 99).toFixed(2)} ms; ${r.failures} failed`;
    }
    case 'rate': {
      const r = await client.call({ op: 'rate', path, count: 4000, concurrency: 8, closeBy: 'target' });
      return `${(r.connections / r.seconds).toFixed(0)} connections/s`;
    }
  }
}

/** `perf record` on a process until stopped; undefined if perf is not usable here. */
function startPerf(pid: number, file: string): ChildProcess | undefined {
  const child = spawn('perf', ['record', '-q', '-e', 'cpu-clock', '-F', '2000', '-g', '-o', file, '-p', String(pid)], { stdio: 'ignore' });
  child.on('error', () => {});
  return child;
}

async function stopPerf(child: ChildProcess | undefined): Promise<void> {
  if (child === undefined || child.exitCode !== null) return;
  child.kill('SIGINT');
  await once(child, 'exit');
}

/** perf's view of a recording: self time by symbol, kernel and JIT code included. */
function perfReport(file: string, top = 30): string {
  const r = spawnSync('perf', ['report', '-i', file, '--stdio', '--no-children', '--sort', 'dso,sym', '--percent-limit', '0.7', '-g', 'none'], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.status !== 0) return `  perf report failed: ${r.stderr.trim().split('\n')[0]}`;
  const lines = r.stdout
    .split('\n')
    .filter((l) => /^\s+\d/.test(l))
    .slice(0, top);
  return lines.map((l) => `  ${l.trim()}`).join('\n');
}

function printReport(r: ProbeReport): void {
  const gc = Object.entries(r.gc)
    .map(([k, v]) => `${k} ${v.count}× ${v.ms.toFixed(1)} ms (max ${v.maxMs.toFixed(2)})`)
    .join(', ');
  console.log(
    `${r.name}: CPU user ${(r.cpu.user / 1000).toFixed(0)} ms + system ${(r.cpu.system / 1000).toFixed(0)} ms; ` +
      `event-loop delay p50 ${r.loopDelay.p50} µs, p99 ${r.loopDelay.p99} µs, max ${r.loopDelay.max} µs; GC: ${gc || 'none'}`,
  );
  if (!r.file.startsWith('error')) console.log(formatSummary(summarizeProfile(r.file)));
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let pairName: PairName = 'yurt-tunnel';
  let out = join(REPO_ROOT, 'bench/results/profiles');
  let perf = false;
  const extraNodeArgs: string[] = [];
  const phases: Phase[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--pair') {
      const names: Record<string, PairName> = { ours: 'yurt-tunnel', 'ours-noresume': 'yurt-tunnel, resume off', 'go-agent': 'Go agent, our server' };
      const name = names[args[++i] ?? ''];
      if (name === undefined) throw new Error(`--pair: ${args[i]}? (ours, ours-noresume, go-agent)`);
      pairName = name;
    } else if (a === '--out') out = args[++i]!;
    else if (a === '--perf') perf = true;
    else if (a === '--node-args') extraNodeArgs.push(...(args[++i] ?? '').split(' ').filter((x) => x !== ''));
    else if ((PHASES as readonly string[]).includes(a)) phases.push(a as Phase);
    else throw new Error(`unknown argument ${a}: phases ${PHASES.join('|')}, --pair ours|ours-noresume|go-agent, --out DIR, --perf, --node-args "..."`);
  }
  if (phases.length === 0) phases.push(...PHASES);
  mkdirSync(out, { recursive: true });
  process.env.YT_PROBE_DIR = out;
  if (perf) process.env.YT_PROBE_CPU_PROFILE = '0';
  const dir = mkdtempSync(join(tmpdir(), 'yurt-profile-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  let pair: Pair | undefined;
  try {
    const probes = new ProbeLines();
    const nodeArgs = ['--import', new URL('./loop-probe.js', import.meta.url).href, ...(perf ? ['--perf-basic-prof'] : []), ...extraNodeArgs];
    const ctx = await prepareOnePair(dir, children, nodeArgs);
    const log = process.env.BENCH_LOG;
    ctx.onOutput = (who, text) => {
      probes.onText(text);
      if (log !== undefined) appendFileSync(`${log}.${who}`, text);
    };
    client = await ClientProcess.start();
    pair = await startPair(pairName, ctx);
    let warmed = false;
    for (const phase of phases) {
      if (phase !== 'cold' && !warmed) {
        await client.call({ op: 'bulk', path: pair.path, bytes: 64 * MiB });
        await client.call({ op: 'rtt', path: pair.path, rounds: 2000 });
        await client.call({ op: 'connections', path: pair.path, rounds: 200 });
        warmed = true;
      }
      await toggle(pair, probes, false);
      const perfFiles = [join(out, `server-${phase}.perf.data`), join(out, `agent-${phase}.perf.data`)];
      const recorders = perf ? [startPerf(pair.serverPid, perfFiles[0]!), startPerf(pair.agentPid, perfFiles[1]!)] : [];
      if (perf) await sleep(300);
      const result = await runPhase(client, pair.path, phase);
      for (const r of recorders) await stopPerf(r);
      const reports = await toggle(pair, probes, true);
      console.log(`\n=== ${phase}: ${result}`);
      for (const r of reports) printReport(r);
      if (perf) {
        for (const [i, who] of ['server', 'agent'].entries()) console.log(`perf, ${who} (cpu-clock samples, self):\n${perfReport(perfFiles[i]!)}`);
      }
    }
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}

runBench('profile', main);
