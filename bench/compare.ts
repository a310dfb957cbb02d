// npm run bench [-- compare]: our server and agent beside Konnectivity's Go pair (and the
// Go agent behind our server), measured the same way, one pair at a time.
//
//   direct:  client ──TCP──► target
//   a pair:  client ──CONNECT over UDS──► server ──gRPC/mTLS──► agent ──TCP──► target
//
// Every role is a process of its own: the target (bench/target.ts), the client
// (bench/client.ts), and the server and agent of the pair under test; this
// driver only starts, stops and reads /proc. Each round runs every pair once,
// the order rotating from round to round (ABC, BCA, CAB, …); a pair is started
// for its run and stopped before the next one starts. Each run: the cold
// figures first (the first connection and the first 2,000 round trips after
// the processes start), then the same warm-up for every pair, then the warm
// figures. Then one memory run per pair. Each figure is printed as the median
// of the rounds with their range. bench/README.md says how to read every row.
// --memory-only runs just the memory rows (one memory run per pair, repeated
// --rounds times), to compare memory changes in minutes.

import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChildProcess } from 'node:child_process';
import { REPO_ROOT, startProcess } from '../hack/local-tunnel.js';
import { ClientProcess } from './client-process.js';
import type { BenchPath } from './lean-conn.js';
import { machineInfo } from './machine.js';
import { pairNames, parsePairNames, preparePairs, rotation, startPair, type Pair, type PairContext, type PairName } from './pairs.js';
import { cpuSeconds, loadAverage, machineBusySeconds, rssBytes } from './proc.js';
import { startGoServer, startOurServer, startSwarm, type RunningServer } from './scale.js';
import { DEFAULT_RESUME_WINDOW_MS } from '../pkg/protocol/resume.js';
import { formatSpread, percentile, spread, type Spread } from './stats.js';
import { envOption, flag, num, text, words, type Scenario } from './options.js';
import { formatTable } from './report.js';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;

interface Sizes {
  bulkBytes: number;
  bulkRuns: number;
  parallelBytes: number;
  rttRounds: number;
  coldRounds: number;
  connRounds: number;
  rateCount: number;
  rateConcurrency: number;
  holdCount: number;
  /** Agent links held by one server alone for the server's RSS with that many agents idle. */
  agentLinks: number;
  slowBytes: number;
  slowBytesPerSecond: number;
}

const FULL: Sizes = {
  bulkBytes: 256 * MiB,
  bulkRuns: 2,
  parallelBytes: 64 * MiB,
  rttRounds: 5000,
  coldRounds: 2000,
  connRounds: 300,
  rateCount: 1000,
  rateConcurrency: 8,
  holdCount: 1000,
  agentLinks: 1000,
  slowBytes: GiB,
  slowBytesPerSecond: 80 * MiB,
};

/** --quick: a smoke run of the harness itself (figures too small to compare). */
const QUICK: Sizes = {
  bulkBytes: 32 * MiB,
  bulkRuns: 1,
  parallelBytes: 8 * MiB,
  rttRounds: 500,
  coldRounds: 2000,
  connRounds: 30,
  rateCount: 100,
  rateConcurrency: 8,
  holdCount: 100,
  agentLinks: 50,
  slowBytes: 64 * MiB,
  slowBytesPerSecond: 32 * MiB,
};

type Who = 'direct' | PairName;

/** Figures per path, each a list with one value per run (or per sample). */
class Figures {
  private readonly data = new Map<Who, Map<string, number[]>>();
  add(who: Who, key: string, value: number): void {
    let m = this.data.get(who);
    if (m === undefined) this.data.set(who, (m = new Map<string, number[]>()));
    let list = m.get(key);
    if (list === undefined) m.set(key, (list = []));
    list.push(value);
  }
  get(who: Who, key: string): Spread | undefined {
    return spread(this.values(who, key));
  }
  /** The samples in the order they were taken (the i-th of every pair comes from the same round). */
  values(who: Who, key: string): number[] {
    return this.data.get(who)?.get(key) ?? [];
  }
  toJSON(): Record<string, Record<string, number[]>> {
    const out: Record<string, Record<string, number[]>> = {};
    for (const [who, m] of this.data) out[who] = Object.fromEntries(m);
    return out;
  }
}

interface Options {
  rounds: number;
  sizes: Sizes;
  only: PairName[] | undefined;
  nodeArgs: string[];
  env: NodeJS.ProcessEnv;
  verbose: boolean;
  memory: boolean;
  memoryOnly: boolean;
  rttOnly: boolean;
  parallelOnly: boolean;
  connOnly: boolean;
  connSamples: string | undefined;
  connSeries: number;
}

/** The default scenario: every pair beside the direct path, rounds rotating. */
export const compareScenario: Scenario = {
  name: 'compare',
  summary: 'the side-by-side table: ours beside Konnectivity and a direct connection (the default; ~13 min on 2 cores)',
  usage:
    '[--rounds N] [--quick] [--only PAIRS] [--no-memory | --memory-only | --rtt-only | --parallel-only | --conn-only] ' +
    '[--conn-series N] [--conn-samples FILE] [--node-args "..."] [--env "K=V ..."] [--verbose]',
  options: {
    rounds: { type: 'string' },
    quick: { type: 'boolean' },
    only: { type: 'string' },
    'no-memory': { type: 'boolean' },
    'memory-only': { type: 'boolean' },
    'rtt-only': { type: 'boolean' },
    'parallel-only': { type: 'boolean' },
    'conn-only': { type: 'boolean' },
    'conn-series': { type: 'string' },
    'conn-samples': { type: 'string' },
    'node-args': { type: 'string' },
    env: { type: 'string' },
    verbose: { type: 'boolean' },
  },
  prepare(v) {
    const only = text(v, 'only');
    const opts: Options = {
      rounds: num(v, 'rounds', 3, 1, 100),
      sizes: flag(v, 'quick') ? QUICK : FULL,
      only: only === undefined ? undefined : parsePairNames(only),
      nodeArgs: words(text(v, 'node-args')),
      env: envOption(v, 'env'),
      verbose: flag(v, 'verbose') || process.env.BENCH_VERBOSE === '1',
      memory: !flag(v, 'no-memory'),
      memoryOnly: flag(v, 'memory-only'),
      rttOnly: flag(v, 'rtt-only'),
      parallelOnly: flag(v, 'parallel-only'),
      connOnly: flag(v, 'conn-only'),
      connSamples: text(v, 'conn-samples'),
      connSeries: num(v, 'conn-series', 1, 1, 100),
    };
    return () => runCompare(opts);
  },
};

/** CPU seconds of the listed processes between `start()` and `stop()`, and what every other process on the machine used meanwhile. */
class CpuWindow {
  private pidsStart: number[] = [];
  private busyStart = 0;
  private wallStart = 0;
  constructor(private readonly pids: number[]) {}
  start(): void {
    this.pidsStart = this.pids.map(cpuSeconds);
    this.busyStart = machineBusySeconds();
    this.wallStart = performance.now();
  }
  /** Per pid CPU seconds, and the share of the machine (0..1) that other processes used. */
  stop(): { perPid: number[]; others: number } {
    const perPid = this.pids.map((p, i) => cpuSeconds(p) - this.pidsStart[i]!);
    const busy = machineBusySeconds() - this.busyStart;
    const wall = (performance.now() - this.wallStart) / 1000;
    const ours = perPid.reduce((a, b) => a + b, 0);
    return { perPid, others: Math.max(0, (busy - ours) / (wall * availableParallelism())) };
  }
}

interface Bench {
  client: ClientProcess;
  targetPid: number;
  figures: Figures;
  sizes: Sizes;
  /** The warm figures stop after the round trips. */
  rttOnly: boolean;
  /** The warm figures are the 4 parallel flows only. */
  parallelOnly: boolean;
  /** The warm figures are the connection rows only (one by one, and the rates). */
  connOnly: boolean;
  /** Where every one-by-one connection's start and time go (bench/client-ops.ts newConnections). */
  connSamples: string | undefined;
  /** Series of one-by-one connections in a row: the first gives the figures, each later one a printed line. */
  connSeries: number;
}

/** A path under test: its route, and the server and agent processes whose CPU is counted. */
interface Subject {
  who: Who;
  path: BenchPath;
  serverPid?: number;
  agentPid?: number;
}

function pidsOf(b: Bench, s: Subject): number[] {
  return [s.serverPid ?? -1, s.agentPid ?? -1, b.client.pid, b.targetPid].filter((p) => p > 0);
}

/** The cold figures: the first connection and the first round trips after the processes started. */
async function measureCold(b: Bench, s: Subject): Promise<void> {
  const [first] = await b.client.call({ op: 'connections', path: s.path, rounds: 1 });
  b.figures.add(s.who, 'coldConn', first!);
  const r = await b.client.call({ op: 'rtt', path: s.path, rounds: b.sizes.coldRounds });
  b.figures.add(s.who, 'coldRttP50', percentile(r, 50));
  b.figures.add(s.who, 'coldRttP99', percentile(r, 99));
  b.figures.add(s.who, 'coldRttMax', Math.max(...r));
}

/** The same warm-up for every path: some of every kind of traffic. */
async function warmUp(b: Bench, s: Subject): Promise<void> {
  await b.client.call({ op: 'bulk', path: s.path, bytes: 64 * MiB });
  await b.client.call({ op: 'rtt', path: s.path, rounds: 2000 });
  await b.client.call({ op: 'connections', path: s.path, rounds: 200 });
  await b.client.call({ op: 'parallel', path: s.path, flows: 4, bytes: 16 * MiB });
}

async function measureWarm(b: Bench, s: Subject): Promise<void> {
  const { client, figures: f, sizes } = b;
  const window = new CpuWindow(pidsOf(b, s));
  const hasPair = s.serverPid !== undefined;
  const others: number[] = [];
  if (b.connOnly) {
    await measureConnections(b, s, window, others);
    return;
  }
  // The direct path is several times faster: more bytes for the same timing precision.
  const bulkBytes = hasPair ? sizes.bulkBytes : sizes.bulkBytes * 4;
  for (let i = 0; i < (b.parallelOnly ? 0 : sizes.bulkRuns); i++) {
    window.start();
    const r = await client.call({ op: 'bulk', path: s.path, bytes: bulkBytes });
    const cpu = window.stop();
    others.push(cpu.others);
    f.add(s.who, 'bulk', r.bytes / r.seconds / MiB);
    if (hasPair) {
      f.add(s.who, 'bulkCpuServer', cpu.perPid[0]! / (r.bytes / GiB));
      f.add(s.who, 'bulkCpuAgent', cpu.perPid[1]! / (r.bytes / GiB));
    }
    f.add(s.who, 'bulkCpuClient', cpu.perPid[hasPair ? 2 : 0]! / (r.bytes / GiB));
  }
  window.start();
  const p = await client.call({ op: 'parallel', path: s.path, flows: 4, bytes: hasPair ? sizes.parallelBytes : sizes.parallelBytes * 4 });
  others.push(window.stop().others);
  f.add(s.who, 'flows4', p.bytes / p.seconds / MiB);
  f.add(s.who, 'fairMin', Math.min(...p.shares) * 100);
  f.add(s.who, 'fairMax', Math.max(...p.shares) * 100);
  if (b.parallelOnly) {
    f.add(s.who, 'others', (others.reduce((a, x) => a + x, 0) / others.length) * 100);
    return;
  }

  window.start();
  const r = await client.call({ op: 'rtt', path: s.path, rounds: sizes.rttRounds });
  const rcpu = window.stop();
  others.push(rcpu.others);
  f.add(s.who, 'rttP50', percentile(r, 50));
  f.add(s.who, 'rttP99', percentile(r, 99));
  f.add(s.who, 'rttP999', percentile(r, 99.9));
  if (hasPair) f.add(s.who, 'rttCpu', ((rcpu.perPid[0]! + rcpu.perPid[1]!) / sizes.rttRounds) * 1e6);
  if (b.rttOnly) {
    f.add(s.who, 'others', (others.reduce((a, x) => a + x, 0) / others.length) * 100);
    return;
  }

  await measureConnections(b, s, window, others);
}

/** The connection rows: new connections one by one, then the sustained rate closed by each end. */
async function measureConnections(b: Bench, s: Subject, window: CpuWindow, others: number[]): Promise<void> {
  const { client, figures: f, sizes } = b;
  const hasPair = s.serverPid !== undefined;
  const series = (k: number) =>
    client.call({ op: 'connections', path: s.path, rounds: sizes.connRounds, samplesFile: b.connSamples, label: `${s.who.replaceAll(' ', '_')}#${k}` });
  const c = await series(1);
  f.add(s.who, 'connP50', percentile(c, 50));
  f.add(s.who, 'connP99', percentile(c, 99));
  // Later series show the tail falling as V8 finishes compiling the connection path (bench/README.md, "The new-connection tail").
  for (let k = 2; k <= b.connSeries; k++) {
    const x = await series(k);
    console.log(`  ${s.who}, one-by-one series ${k}: p50 ${percentile(x, 50).toFixed(3)} ms, p99 ${percentile(x, 99).toFixed(3)} ms`);
  }

  window.start();
  const rate = await client.call({ op: 'rate', path: s.path, count: sizes.rateCount, concurrency: sizes.rateConcurrency, closeBy: 'target' });
  const ccpu = window.stop();
  others.push(ccpu.others);
  f.add(s.who, 'rate', rate.connections / rate.seconds);
  if (hasPair) f.add(s.who, 'connCpu', ((ccpu.perPid[0]! + ccpu.perPid[1]!) / rate.connections) * 1000);
  // A client's end reaches an upstream agent only as a full close after our
  // server's linger (--half-closed-linger): by design, so not measured there.
  if (s.who !== 'Go agent, our server') {
    const r2 = await client.call({ op: 'rate', path: s.path, count: sizes.rateCount, concurrency: sizes.rateConcurrency, closeBy: 'client' });
    f.add(s.who, 'rateClientClose', r2.connections / r2.seconds);
  }
  f.add(s.who, 'others', (others.reduce((a, x) => a + x, 0) / others.length) * 100);
}

/**
 * Memory, on processes just started (no warm-up: what a fresh agent costs):
 * RSS at idle, with many idle connections, and while a slow reader takes a
 * large transfer.
 */
async function measureMemory(b: Bench, pair: Pair): Promise<void> {
  const { client, figures: f, sizes } = b;
  const who = pair.name;
  f.add(who, 'rssServerIdle', rssBytes(pair.serverPid) / MiB);
  f.add(who, 'rssAgentIdle', rssBytes(pair.agentPid) / MiB);
  await client.call({ op: 'hold', path: pair.path, count: sizes.holdCount });
  await sleep(1000);
  f.add(who, 'rssServerHold', rssBytes(pair.serverPid) / MiB);
  f.add(who, 'rssAgentHold', rssBytes(pair.agentPid) / MiB);
  await client.call({ op: 'release' });
  await sleep(1000);
  const start = { server: rssBytes(pair.serverPid), agent: rssBytes(pair.agentPid) };
  const peak = { ...start };
  const sampler = setInterval(() => {
    peak.server = Math.max(peak.server, rssBytes(pair.serverPid));
    peak.agent = Math.max(peak.agent, rssBytes(pair.agentPid));
  }, 100);
  try {
    await client.call({ op: 'slow', path: pair.path, bytes: sizes.slowBytes, bytesPerSecond: sizes.slowBytesPerSecond });
  } finally {
    clearInterval(sampler);
  }
  f.add(who, 'slowServerStart', start.server / MiB);
  f.add(who, 'slowServerPeak', peak.server / MiB);
  f.add(who, 'slowAgentStart', start.agent / MiB);
  f.add(who, 'slowAgentPeak', peak.agent / MiB);
}

/** Agent links per swarm process, as the scale scenario holds them. */
const LINKS_PER_SWARM = 250;

/**
 * The server alone with `sizes.agentLinks` agent links connected and idle (no
 * connection tunnelled): its RSS 2 s after the last connected, as the scale scenario's
 * "RSS agents only". The links are `bench/agent-swarm.ts`'s, a few processes
 * of real `pkg/agent` ServerConnections; towards our server they announce
 * session resume as the agent CLI does (not for the pair with resume off, nor
 * for Konnectivity's server). The Go agent's pair has our server: not repeated.
 */
async function measureServerWithAgents(b: Bench, who: PairName, ctx: PairContext): Promise<void> {
  let server: RunningServer;
  let resumeWindowMs = 0;
  if (who === 'yurt-tunnel' || who === RESUME_OFF) {
    server = await startOurServer(ctx, ctx.targetAddress, {
      nodeArgs: ctx.nodeArgs,
      env: ctx.env,
      ...(who === RESUME_OFF ? { args: ['--resume-window', '0'] } : {}),
    });
    if (who === 'yurt-tunnel') resumeWindowMs = DEFAULT_RESUME_WINDOW_MS;
  } else if (who === 'Konnectivity') {
    server = await startGoServer(ctx, ctx.targetAddress);
  } else {
    return;
  }
  try {
    const n = b.sizes.agentLinks;
    const swarm = await startSwarm(n, LINKS_PER_SWARM, server.agentPort, join(ctx.dir, 'bench'), resumeWindowMs);
    try {
      await server.agentsConnected(n);
      await sleep(2000);
      b.figures.add(who, 'rssServerAgents', rssBytes(server.pid) / MiB);
    } finally {
      await swarm.stop();
    }
  } finally {
    await server.stop();
  }
}

interface Row {
  key: string;
  label: string;
  digits: number;
  /** 'higher' or 'lower' is better; undefined: no ratio. */
  better?: 'higher' | 'lower';
  /** The issue's goal, as text. */
  goal?: string;
  /** Whether ours meets the goal, from ours and Konnectivity's medians. */
  meets?: (ours: number, konn: number | undefined) => boolean;
  /** Issue 18's goal applies: resume on costs at most 5 % against resume off (needs `better`). */
  resumeGoal?: true;
}

/** Issue 18: session resume may cost at most this much of a figure. */
const RESUME_MAX_LOSS = 0.05;

/** Whether on ÷ off stays within RESUME_MAX_LOSS, in the direction that is worse for the row. */
function resumeMeets(ratio: number, better: 'higher' | 'lower'): boolean {
  return better === 'higher' ? ratio >= 1 - RESUME_MAX_LOSS : ratio <= 1 + RESUME_MAX_LOSS;
}

const SECTIONS: Array<[string, Row[]]> = [
  [
    'warm',
    [
      {
        key: 'bulk',
        label: 'bulk target→client, MiB/s',
        digits: 0,
        better: 'higher',
        goal: '≥ 2.5× Konn.',
        meets: (o, k) => k !== undefined && o >= 2.5 * k,
        resumeGoal: true,
      },
      { key: 'bulkCpuServer', label: '  server CPU s per GiB', digits: 2, better: 'lower', resumeGoal: true },
      { key: 'bulkCpuAgent', label: '  agent CPU s per GiB', digits: 2, better: 'lower', resumeGoal: true },
      { key: 'bulkCpuClient', label: '  client CPU s per GiB', digits: 2 },
      { key: 'flows4', label: '4 flows together, MiB/s', digits: 0, better: 'higher' },
      { key: 'fairMin', label: '  slowest flow, % of fair share', digits: 0, goal: '≥ 80 %', meets: (o) => o >= 80 },
      { key: 'fairMax', label: '  fastest flow, % of fair share', digits: 0, goal: '≤ 120 %', meets: (o) => o <= 120 },
      {
        key: 'rttP50',
        label: 'RTT p50, µs',
        digits: 0,
        better: 'lower',
        goal: '≤ 0.8× Konn.',
        meets: (o, k) => k !== undefined && o <= 0.8 * k,
        resumeGoal: true,
      },
      {
        key: 'rttP99',
        label: 'RTT p99, µs',
        digits: 0,
        better: 'lower',
        goal: '≤ 0.8× Konn.',
        meets: (o, k) => k !== undefined && o <= 0.8 * k,
        resumeGoal: true,
      },
      { key: 'rttP999', label: 'RTT p99.9, µs', digits: 0, better: 'lower' },
      { key: 'rttCpu', label: '  server+agent CPU µs per round trip', digits: 0, better: 'lower' },
      {
        key: 'connP50',
        label: 'new connection p50, ms',
        digits: 3,
        better: 'lower',
        goal: '≤ 0.8× Konn.',
        meets: (o, k) => k !== undefined && o <= 0.8 * k,
        resumeGoal: true,
      },
      { key: 'connP99', label: 'new connection p99, ms', digits: 3, better: 'lower' },
      {
        key: 'rate',
        label: 'new connections/s, 8 at once, target closes',
        digits: 0,
        better: 'higher',
        goal: '≥ Konn.',
        meets: (o, k) => k !== undefined && o >= k,
        resumeGoal: true,
      },
      {
        key: 'rateClientClose',
        label: 'new connections/s, 8 at once, client closes',
        digits: 0,
        better: 'higher',
        goal: '≥ Konn.',
        meets: (o, k) => k !== undefined && o >= k,
      },
      { key: 'connCpu', label: '  server+agent CPU ms per connection', digits: 2, better: 'lower' },
      { key: 'others', label: 'machine used by other processes, %', digits: 0 },
    ],
  ],
  [
    'cold (just started)',
    [
      { key: 'readyMs', label: 'start to ready (server and agent started, agent connected), ms', digits: 0, better: 'lower' },
      { key: 'coldConn', label: 'first connection, ms', digits: 2, better: 'lower' },
      { key: 'coldRttP50', label: 'RTT p50 of the first 2,000, µs', digits: 0, better: 'lower' },
      { key: 'coldRttP99', label: 'RTT p99 of the first 2,000, µs', digits: 0, better: 'lower', goal: '≤ 1000 µs', meets: (o) => o <= 1000 },
      { key: 'coldRttMax', label: 'RTT max of the first 2,000, µs', digits: 0, better: 'lower' },
    ],
  ],
  [
    'memory (fresh processes, one run each; "after the bench" from the warm runs)',
    [
      { key: 'rssServerAfter', label: 'server RSS after the warm run, MB', digits: 0, better: 'lower' },
      { key: 'rssAgentAfter', label: 'agent RSS after the warm run, MB', digits: 0, better: 'lower' },
      { key: 'rssServerIdle', label: 'server RSS idle, MB', digits: 0, better: 'lower' },
      { key: 'rssAgentIdle', label: 'agent RSS idle, MB', digits: 0, better: 'lower' },
      { key: 'rssServerHold', label: 'server RSS, 1,000 idle connections, MB', digits: 0, better: 'lower' },
      { key: 'rssAgentHold', label: 'agent RSS, 1,000 idle connections, MB', digits: 0, better: 'lower', goal: '≤ 60 MB', meets: (o) => o <= 60 },
      {
        key: 'rssServerAgents',
        label: 'server RSS, 1,000 idle agents, MB',
        digits: 0,
        better: 'lower',
        goal: '≤ 100 MB',
        meets: (o) => o <= 100,
      },
      { key: 'slowServerStart', label: 'server RSS before the slow reader, MB', digits: 0 },
      { key: 'slowServerPeak', label: 'server RSS peak, slow reader, MB', digits: 0, better: 'lower' },
      { key: 'slowAgentStart', label: 'agent RSS before the slow reader, MB', digits: 0 },
      { key: 'slowAgentPeak', label: 'agent RSS peak, slow reader, MB', digits: 0, better: 'lower' },
    ],
  ],
];

const RESUME_OFF: PairName = 'yurt-tunnel, resume off';

/** "1.02× (0.97–1.10)": on ÷ off of the samples taken in the same round, paired by position; '' when they do not pair up. */
function pairedRatios(f: Figures, key: string): string {
  const on = f.values('yurt-tunnel', key);
  const off = f.values(RESUME_OFF, key);
  if (on.length === 0 || on.length !== off.length || off.some((v) => v <= 0)) return '';
  const s = spread(on.map((v, i) => v / off[i]!))!;
  return s.n === 1 ? `${s.median.toFixed(2)}×` : `${s.median.toFixed(2)}× (${s.min.toFixed(2)}–${s.max.toFixed(2)})`;
}

function printTable(f: Figures, columns: Who[], sizes: Sizes): void {
  // The resume columns appear when both of our pairs ran.
  const withResume = columns.includes('yurt-tunnel') && columns.includes(RESUME_OFF);
  const resumeHeader = withResume ? ['resume on ÷ off', 'same round', 'goal', ''] : [];
  const header = ['', ...columns, 'ours ÷ Konn.', 'goal', '', ...resumeHeader];
  const body: string[][] = [];
  for (const [section, rows] of SECTIONS) {
    body.push([`— ${section}`, ...columns.map(() => ''), '', '', '', ...resumeHeader.map(() => '')]);
    for (const row of rows) {
      const cells = columns.map((c) => formatSpread(f.get(c, row.key), row.digits));
      if (cells.every((c) => c === '–')) continue;
      const ours = f.get('yurt-tunnel', row.key)?.median;
      const konn = f.get('Konnectivity', row.key)?.median;
      const ratio = row.better !== undefined && ours !== undefined && konn !== undefined && konn > 0 ? `${(ours / konn).toFixed(2)}×` : '';
      const verdict = row.meets === undefined || ours === undefined ? '' : row.meets(ours, konn) ? 'met' : 'NOT MET';
      const resumeCells: string[] = [];
      if (withResume) {
        const off = f.get(RESUME_OFF, row.key)?.median;
        const onOff = row.better !== undefined && ours !== undefined && off !== undefined && off > 0 ? ours / off : undefined;
        const goal = row.resumeGoal === true && onOff !== undefined;
        resumeCells.push(
          onOff === undefined ? '' : `${onOff.toFixed(2)}×`,
          onOff === undefined ? '' : pairedRatios(f, row.key),
          goal ? (row.better === 'higher' ? '≥ 0.95× off' : '≤ 1.05× off') : '',
          goal ? (resumeMeets(onOff, row.better!) ? 'met' : 'NOT MET') : '',
        );
      }
      body.push([row.label, ...cells, ratio, row.goal ?? '', verdict, ...resumeCells]);
    }
  }
  console.log('\n' + formatTable(header, body));
  console.log(
    `\nmedian of the runs (range in brackets). bulk ${sizes.bulkBytes / MiB} MiB × ${sizes.bulkRuns} per run (direct: 4×), ` +
      `4 flows × ${sizes.parallelBytes / MiB} MiB, ${sizes.rttRounds} round trips, ${sizes.connRounds} connections one by one, ` +
      `${sizes.rateCount} at ${sizes.rateConcurrency} at once; slow reader ${sizes.slowBytes / MiB} MiB at ${sizes.slowBytesPerSecond / MiB} MiB/s; ` +
      `${sizes.agentLinks} agent links (bench/agent-swarm.ts) to a server alone.`,
  );
}

/**
 * The client must not be what limits a tunnel: direct (same client) ≥ 10× the
 * fastest tunnel. Where that rule of thumb fails (a tunnel past a tenth of what
 * loopback carries), the client's own CPU while it read that tunnel says it.
 */
function printClientCheck(f: Figures, pairs: PairName[]): void {
  const direct = f.get('direct', 'bulk')?.median;
  let fastestPair: PairName | undefined;
  let fastest = 0;
  for (const p of pairs) {
    const bulk = f.get(p, 'bulk')?.median ?? 0;
    if (bulk > fastest) [fastestPair, fastest] = [p, bulk];
  }
  if (direct === undefined || fastestPair === undefined) return;
  const ratio = direct / fastest;
  const clientCpuPerGiB = f.get(fastestPair, 'bulkCpuClient')?.median;
  const busy = clientCpuPerGiB === undefined ? undefined : (clientCpuPerGiB * fastest) / 1024;
  const busyText = busy === undefined ? '' : `; the client was busy ${(busy * 100).toFixed(0)} % of one core reading it`;
  let verdict: string;
  if (ratio >= 10) verdict = 'the client is not the bottleneck';
  else if (busy !== undefined && busy < 0.5) verdict = 'below the 10× rule of thumb, but by its own CPU the client is not the bottleneck';
  else verdict = 'BELOW 10×: the client or the machine may limit the tunnel figures';
  console.log(
    `client check: direct ${direct.toFixed(0)} MiB/s = ${ratio.toFixed(1)}× the fastest tunnel (${fastest.toFixed(0)} MiB/s), same client${busyText}: ${verdict}`,
  );
}

async function runCompare(opts: Options): Promise<unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'yurt-bench-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  try {
    const target = await startProcess(children, join(REPO_ROOT, 'dist/bench/target.js'), [], /^(\d+)\n/);
    const targetPort = Number(target.match[1]);
    const ctx: PairContext = await preparePairs(dir, `127.0.0.1:${targetPort}`, opts.nodeArgs, opts.verbose, opts.env);
    const m = machineInfo(ctx.go);
    const load0 = loadAverage();
    console.log(`machine: nproc ${m.nproc}, ${m.cpuModel}, Linux ${m.kernel}, Node ${m.node}`);
    console.log(`Konnectivity: proxy-server ${m.goServer}; proxy-agent ${m.goAgent}`);
    if (ctx.go === undefined) console.log('Konnectivity binaries not found (shared/konnectivity or KONNECTIVITY_BIN_DIR): its columns are left out');
    const pairs = pairNames(ctx).filter((p) => opts.only === undefined || opts.only.includes(p));
    console.log(`pairs: ${pairs.join(', ')}; ${opts.rounds} rounds, order rotating; load average at start ${load0.toFixed(2)}`);
    if (opts.nodeArgs.length > 0) console.log(`Node options for our server and agent: ${opts.nodeArgs.join(' ')}`);
    const envText = Object.entries(opts.env).map(([k, v]) => `${k}=${v}`);
    if (envText.length > 0) console.log(`environment of our server and agent: ${envText.join(' ')}`);

    client = await ClientProcess.start();
    const b: Bench = {
      client,
      targetPid: target.child.pid!,
      figures: new Figures(),
      sizes: opts.sizes,
      rttOnly: opts.rttOnly,
      parallelOnly: opts.parallelOnly,
      connOnly: opts.connOnly,
      connSamples: opts.connSamples,
      connSeries: opts.connSeries,
    };
    const direct: Subject = { who: 'direct', path: { kind: 'tcp', port: targetPort } };
    if (!opts.memoryOnly) await warmUp(b, direct);
    for (let round = 0; round < (opts.memoryOnly ? 0 : opts.rounds); round++) {
      const order = rotation(pairs, round);
      console.log(`round ${round + 1}/${opts.rounds}: direct, ${order.join(', ')}`);
      await measureWarm(b, direct);
      for (const name of order) {
        const starting = performance.now();
        const pair = await startPair(name, ctx);
        try {
          // Our CLIs rehearse their data path before they report ready: the cold rows are after that, so its time is a row too.
          b.figures.add(name, 'readyMs', performance.now() - starting);
          const s: Subject = { who: name, path: pair.path, serverPid: pair.serverPid, agentPid: pair.agentPid };
          await measureCold(b, s);
          await warmUp(b, s);
          await measureWarm(b, s);
          b.figures.add(name, 'rssServerAfter', rssBytes(pair.serverPid) / MiB);
          b.figures.add(name, 'rssAgentAfter', rssBytes(pair.agentPid) / MiB);
        } finally {
          await pair.stop();
        }
      }
    }
    if (opts.memory && !opts.rttOnly && !opts.parallelOnly && !opts.connOnly) {
      const runs = opts.memoryOnly ? opts.rounds : 1;
      for (let run = 0; run < runs * pairs.length; run++) {
        // Rotating, as the warm rounds: with --memory-only --rounds N each pair N times, alternated.
        const name = pairs[run % pairs.length]!;
        console.log(`memory: ${name}${runs > 1 ? ` (${Math.floor(run / pairs.length) + 1}/${runs})` : ''}`);
        const pair = await startPair(name, ctx);
        try {
          await measureMemory(b, pair);
        } finally {
          await pair.stop();
        }
        await measureServerWithAgents(b, name, ctx);
      }
    }
    printTable(b.figures, ['direct', ...pairs], opts.sizes);
    printClientCheck(b.figures, pairs);
    console.log(`load average: ${load0.toFixed(2)} at start, ${loadAverage().toFixed(2)} at the end`);
    return { machine: m, rounds: opts.rounds, sizes: opts.sizes, figures: b.figures.toJSON() };
  } finally {
    await client?.stop();
    for (const c of children) c.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}
