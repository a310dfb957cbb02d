// npm run bench -- scale: one server with many agents.
//
// For 10, 100 and 1,000 agents (--agents), each server in turn (ours, then
// Konnectivity's Go proxy-server, one at a time): the agents connect (links
// from a few load-generating processes, bench/agent-swarm.ts, --links-per-process
// each, keepalives on, session resume announced as the agent CLI does by
// default, so the server keeps a session per link), the client opens 10 idle
// connections per agent (--conns-per-agent; the servers' `default` strategy
// spreads them over the agents at random, the same for both), then:
//   idle   the server's RSS and CPU over --idle seconds, keepalives ticking;
//   load   a steady --rate new connections per second for --seconds (open loop,
//          CONNECT → 200 timed as the dial, then one byte echoed, timed from the
//          CONNECT too, the target closes), spread over the agents the same way:
//          dial and echo p50/p99 and the server's CPU. Compare the echo columns:
//          Konnectivity v0.30 answers 200 before it dials, so its dial column
//          has no round trip to the agent in it (ours does).
// Then the same with real Go proxy-agents behind each server (--go-agents, a
// list of counts, one process each; what they cost the machine, by PSS, is
// printed with each row, so a run also says how many this machine holds).
// Writes bench/results/scale.json and scale.svg (--out DIR elsewhere).

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { goAgentArgs, goServerArgs } from '../hack/konnectivity.js';
import { freeLowPort } from '../hack/ports.js';
import { REPO_ROOT, startLocalTunnel, startProcess } from '../hack/local-tunnel.js';
import { ClientProcess } from './client-process.js';
import type { BenchPath } from './lean-conn.js';
import { machineInfo } from './machine.js';
import { preparePairs, type PairContext } from './pairs.js';
import { cpuSeconds, loadAverage, memAvailableBytes, pssBytes, rssBytes } from './proc.js';
import { percentile } from './stats.js';
import { svgCharts, type Chart } from './svg-plot.js';
import { num, numList, text, type Scenario } from './options.js';
import { formatTable } from './report.js';
import { DEFAULT_RESUME_WINDOW_MS } from '../pkg/protocol/resume.js';

const MiB = 1024 * 1024;

/**
 * Our server's flags for a swarm of agent links: one certificate for every
 * agent (identity is not what is measured), no limits on links or their rate,
 * and the strategy that spreads connections over the agents.
 */
export const SWARM_SERVER_ARGS: readonly string[] = [
  '--agent-identity-check',
  'none',
  '--max-agent-streams',
  '1000000',
  '--max-agent-connect-rate',
  '0',
  '--proxy-strategy',
  'default',
];

interface ScaleOptions {
  agents: number[];
  goAgents: number[];
  connsPerAgent: number;
  linksPerProcess: number;
  rate: number;
  seconds: number;
  idleSeconds: number;
  out: string;
}

export type ServerKind = 'yurt-tunnel' | 'Konnectivity';

interface ScaleRow {
  server: ServerKind;
  agents: number;
  agentKind: 'links' | 'Go agents';
  processes: number;
  connections: number;
  /** RSS with the agents connected and no connection open. */
  rssAgentsMB: number;
  rssIdleMB: number;
  cpuIdlePct: number;
  dialP50: number;
  dialP99: number;
  /** To the echoed byte: comparable between the servers (Konnectivity v0.30 answers 200 before it dials). */
  echoP50: number;
  echoP99: number;
  achievedRate: number;
  failures: number;
  cpuLoadPct: number;
  rssLoadMB: number;
  /** Go agent rows: the agents' processes together (PSS: shared pages counted once), and what the machine had left, with every agent connected. */
  agentsPssMB?: number;
  memAvailableMB?: number;
}

export const scaleScenario: Scenario = {
  name: 'scale',
  summary: 'one server with 10, 100, 1,000 agent links, then 100 and 1,000 Go agents; writes bench/results/scale.json, scale.svg (~8 min)',
  usage: '[--agents 10,100,1000] [--go-agents 100,1000] [--conns-per-agent N] [--links-per-process N] [--rate N] [--seconds N] [--idle N] [--out DIR]',
  options: {
    agents: { type: 'string' },
    'go-agents': { type: 'string' },
    'conns-per-agent': { type: 'string' },
    'links-per-process': { type: 'string' },
    rate: { type: 'string' },
    seconds: { type: 'string' },
    idle: { type: 'string' },
    out: { type: 'string' },
  },
  prepare(v) {
    const o: ScaleOptions = {
      agents: numList(v, 'agents', [10, 100, 1000], 1, 100_000),
      goAgents: numList(v, 'go-agents', [100, 1000], 0, 10_000).filter((g) => g > 0),
      connsPerAgent: num(v, 'conns-per-agent', 10, 0, 1000),
      linksPerProcess: num(v, 'links-per-process', 250, 1, 10_000),
      rate: num(v, 'rate', 200, 1, 100_000),
      seconds: num(v, 'seconds', 10, 1, 3600),
      idleSeconds: num(v, 'idle', 10, 0, 3600),
      out: text(v, 'out') ?? join(REPO_ROOT, 'bench/results'),
    };
    return () => runScale(o);
  },
};

export interface RunningServer {
  pid: number;
  agentPort: number;
  path: BenchPath;
  /** Resolves once `n` agents in all have connected since start. */
  agentsConnected(n: number): Promise<void>;
  stop(): Promise<void>;
}

/** Counts "agent connected" lines in a server's output. */
function connectionCounter(pattern: RegExp): { onText: (t: string) => void; wait: (n: number) => Promise<void> } {
  let count = 0;
  let waiter: { n: number; resolve: () => void } | undefined;
  return {
    onText: (t) => {
      count += t.split(pattern).length - 1;
      if (waiter !== undefined && count >= waiter.n) waiter.resolve();
    },
    wait: (n) =>
      new Promise<void>((resolve, reject) => {
        if (count >= n) return resolve();
        const timer = setTimeout(() => reject(new Error(`only ${count} of ${n} agents connected within 120 s`)), 120_000);
        waiter = {
          n,
          resolve: () => {
            clearTimeout(timer);
            waiter = undefined;
            resolve();
          },
        };
      }),
  };
}

/** Our server alone (no agent); `extra` adds server flags, Node options and environment (npm run bench's --node-args and --env). */
export async function startOurServer(
  ctx: PairContext,
  targetAddress: string,
  extra: { args?: string[]; nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<RunningServer> {
  const counter = connectionCounter(/agent connected/g);
  const local = await startLocalTunnel({
    certDir: ctx.certDir,
    agent: false,
    serverArgs: [...SWARM_SERVER_ARGS, ...(extra.args ?? [])],
    serverNodeArgs: extra.nodeArgs,
    serverEnv: extra.env,
    onOutput: (_who, text) => counter.onText(text),
  });
  return {
    pid: local.children[0]!.pid!,
    agentPort: local.agentPort,
    path: { kind: 'connect', uds: local.udsPath, address: targetAddress },
    agentsConnected: counter.wait,
    stop: () => local.stop(),
  };
}

export async function startGoServer(ctx: PairContext, targetAddress: string): Promise<RunningServer> {
  const counter = connectionCounter(/"Agent connected"/g);
  const udsPath = join(ctx.dir, `scale-konnectivity-${Date.now()}.sock`);
  const ports = { agentPort: await freeLowPort(), healthPort: await freeLowPort(), adminPort: await freeLowPort() };
  // Keepalive pings every 10 s, as ours; agents picked at random, as ours here.
  const args = [...goServerArgs(ctx.certDir, udsPath, ports), '--proxy-strategies=default', '--keepalive-time=10s'];
  const child = spawn(ctx.go!.proxyServer, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let started!: () => void;
  const ready = new Promise<void>((r) => (started = r));
  const onText = (b: Buffer): void => {
    const t = b.toString();
    counter.onText(t);
    if (t.includes('Starting agent server for tunnel connections')) started();
  };
  child.stdout.on('data', onText);
  child.stderr.on('data', onText);
  await ready;
  return {
    pid: child.pid!,
    agentPort: ports.agentPort,
    path: { kind: 'connect', uds: udsPath, address: targetAddress },
    agentsConnected: counter.wait,
    stop: async () => {
      if (child.exitCode === null) {
        child.kill('SIGTERM');
        await once(child, 'exit');
      }
    },
  };
}

/** Agent links from ceil(n / perProcess) swarm processes; `resumeWindowMs` > 0 announces session resume as the agent CLI does. */
export async function startSwarm(
  n: number,
  perProcess: number,
  agentPort: number,
  certDir: string,
  resumeWindowMs = 0,
): Promise<{ processes: number; stop: () => Promise<void> }> {
  const children: ChildProcess[] = [];
  const starts: Promise<unknown>[] = [];
  for (let first = 0; first < n; first += perProcess) {
    const count = Math.min(perProcess, n - first);
    const child = spawn(
      process.execPath,
      [join(REPO_ROOT, 'dist/bench/agent-swarm.js'), `127.0.0.1:${agentPort}`, String(first), String(count), certDir, String(resumeWindowMs)],
      {
        stdio: ['pipe', 'pipe', 'inherit'],
      },
    );
    children.push(child);
    const lines = createInterface({ input: child.stdout });
    starts.push(
      new Promise<void>((resolve, reject) => {
        lines.on('line', (l) => {
          if (l.startsWith('ready')) resolve();
          else if (l.startsWith('lost')) process.stderr.write(`agent swarm: ${l}\n`);
        });
        child.once('exit', (code) => reject(new Error(`agent swarm exited with ${code}`)));
      }),
    );
  }
  await Promise.all(starts);
  return {
    processes: children.length,
    stop: async () => {
      await Promise.all(
        children.map(async (c) => {
          if (c.exitCode !== null) return;
          c.stdin!.end();
          await once(c, 'exit');
        }),
      );
    },
  };
}

/** G real Go agents, one process each, each given health and admin ports no other agent of the run has. */
async function startGoAgents(
  ctx: PairContext,
  g: number,
  agentPort: number,
): Promise<{ processes: number; pids: () => number[]; exited: () => number; stop: () => Promise<void> }> {
  const children: ChildProcess[] = [];
  const running = (c: ChildProcess): boolean => c.exitCode === null && c.signalCode === null;
  const taken = new Set<number>();
  const port = async (): Promise<number> => {
    for (;;) {
      const p = await freeLowPort();
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  for (let i = 0; i < g; i++) {
    const id = `scale-go-${i}`;
    const args = goAgentArgs(join(ctx.dir, 'bench'), agentPort, id, `host=${id}`, await port(), await port());
    const child = spawn(ctx.go!.proxyAgent, args, { stdio: ['ignore', 'ignore', 'ignore'] });
    children.push(child);
  }
  return {
    processes: g,
    pids: () => children.filter(running).map((c) => c.pid!),
    exited: () => children.filter((c) => !running(c)).length,
    stop: async () => {
      await Promise.all(
        children.map(async (c) => {
          if (!running(c)) return;
          c.kill('SIGTERM');
          await once(c, 'exit');
        }),
      );
    },
  };
}

async function measure(
  client: ClientProcess,
  server: RunningServer,
  o: ScaleOptions,
  n: number,
): Promise<Omit<ScaleRow, 'server' | 'agents' | 'agentKind' | 'processes'>> {
  await sleep(2000);
  const rssAgents = rssBytes(server.pid);
  const connections = await client.call({ op: 'hold', path: server.path, count: n * o.connsPerAgent });
  await sleep(1000);
  const c0 = cpuSeconds(server.pid);
  let rssIdle = 0;
  for (let t = 0; t < o.idleSeconds; t++) {
    await sleep(1000);
    rssIdle = Math.max(rssIdle, rssBytes(server.pid));
  }
  const cpuIdle = (cpuSeconds(server.pid) - c0) / o.idleSeconds;
  const c1 = cpuSeconds(server.pid);
  const w0 = performance.now();
  const r = await client.call({ op: 'paced', path: server.path, perSecond: o.rate, seconds: o.seconds });
  const wall = (performance.now() - w0) / 1000;
  const cpuLoad = (cpuSeconds(server.pid) - c1) / wall;
  const rssLoad = rssBytes(server.pid);
  if (r.failures > 0) process.stderr.write(`  ${r.failures} dials failed, first: ${r.firstError}\n`);
  await client.call({ op: 'release' });
  return {
    connections,
    rssAgentsMB: rssAgents / MiB,
    rssIdleMB: rssIdle / MiB,
    cpuIdlePct: cpuIdle * 100,
    dialP50: percentile(r.dialMs, 50),
    dialP99: percentile(r.dialMs, 99),
    echoP50: percentile(r.echoMs, 50),
    echoP99: percentile(r.echoMs, 99),
    achievedRate: r.dialMs.length / r.seconds,
    failures: r.failures,
    cpuLoadPct: cpuLoad * 100,
    rssLoadMB: rssLoad / MiB,
  };
}

function printRows(rows: ScaleRow[]): void {
  const header = [
    'server',
    'agents',
    'processes',
    'RSS agents only MB',
    'idle conns',
    'RSS idle MB',
    'CPU idle %',
    `dial p50 ms`,
    'dial p99 ms',
    'echo p50 ms',
    'echo p99 ms',
    'dials/s',
    'failed',
    'CPU load %',
    'RSS load MB',
  ];
  const body = rows.map((r) => [
    r.server,
    `${r.agents} ${r.agentKind}`,
    String(r.processes),
    r.rssAgentsMB.toFixed(0),
    String(r.connections),
    r.rssIdleMB.toFixed(0),
    r.cpuIdlePct.toFixed(1),
    r.dialP50.toFixed(2),
    r.dialP99.toFixed(2),
    r.echoP50.toFixed(2),
    r.echoP99.toFixed(2),
    r.achievedRate.toFixed(0),
    String(r.failures),
    r.cpuLoadPct.toFixed(0),
    r.rssLoadMB.toFixed(0),
  ]);
  console.log('\n' + formatTable(header, body));
  for (const r of rows) {
    if (r.agentsPssMB === undefined) continue;
    console.log(
      `${r.agents} Go agents behind ${r.server}: their processes ${r.agentsPssMB.toFixed(0)} MB in all by PSS (${((r.agentsPssMB * 1024) / r.agents).toFixed(0)} KiB each), ` +
        `the machine had ${r.memAvailableMB!.toFixed(0)} MB available with all connected`,
    );
  }
}

function plot(rows: ScaleRow[], o: ScaleOptions, caption: string): string {
  const series = (
    key: keyof ScaleRow,
    server: ServerKind,
    color: string,
    dashed = false,
    name: string = server,
    kind: ScaleRow['agentKind'] = 'links',
  ): Chart['series'][number] => ({
    name,
    color,
    dashed,
    points: rows.filter((r) => r.server === server && r.agentKind === kind).map((r) => [r.agents, r[key] as number]),
  });
  const charts: Chart[] = [
    {
      title: 'server RSS, idle',
      xLabel: 'agents',
      yLabel: 'MB',
      xLog: true,
      series: [
        series('rssAgentsMB', 'yurt-tunnel', '#1f77b4', true, 'yurt-tunnel, agents only'),
        series('rssIdleMB', 'yurt-tunnel', '#1f77b4', false, `yurt-tunnel, + ${o.connsPerAgent} conns/agent`),
        series('rssAgentsMB', 'Konnectivity', '#d62728', true, 'Konnectivity, agents only'),
        series('rssIdleMB', 'Konnectivity', '#d62728', false, `Konnectivity, + ${o.connsPerAgent} conns/agent`),
        series('rssAgentsMB', 'yurt-tunnel', '#9ecae1', true, 'yurt-tunnel, Go agents only', 'Go agents'),
        series('rssAgentsMB', 'Konnectivity', '#f4a582', true, 'Konnectivity, Go agents only', 'Go agents'),
      ],
    },
    {
      title: 'server CPU',
      xLabel: 'agents',
      yLabel: '% of one core',
      xLog: true,
      series: [
        series('cpuIdlePct', 'yurt-tunnel', '#1f77b4', true, 'yurt-tunnel idle'),
        series('cpuIdlePct', 'Konnectivity', '#d62728', true, 'Konnectivity idle'),
        series('cpuLoadPct', 'yurt-tunnel', '#1f77b4', false, `yurt-tunnel, ${o.rate} dials/s`),
        series('cpuLoadPct', 'Konnectivity', '#d62728', false, `Konnectivity, ${o.rate} dials/s`),
      ],
    },
    {
      title: `CONNECT to echo, ${o.rate} new conns/s`,
      xLabel: 'agents',
      yLabel: 'ms',
      xLog: true,
      series: [
        series('echoP50', 'yurt-tunnel', '#1f77b4', true, 'yurt-tunnel p50'),
        series('echoP99', 'yurt-tunnel', '#1f77b4', false, 'yurt-tunnel p99'),
        series('echoP50', 'Konnectivity', '#d62728', true, 'Konnectivity p50'),
        series('echoP99', 'Konnectivity', '#d62728', false, 'Konnectivity p99'),
        series('echoP50', 'yurt-tunnel', '#9ecae1', true, 'yurt-tunnel p50, Go agents', 'Go agents'),
        series('echoP50', 'Konnectivity', '#f4a582', true, 'Konnectivity p50, Go agents', 'Go agents'),
      ],
    },
  ];
  return svgCharts(charts, caption);
}

async function runScale(o: ScaleOptions): Promise<unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'yurt-scale-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  const rows: ScaleRow[] = [];
  try {
    const target = await startProcess(children, join(REPO_ROOT, 'dist/bench/target.js'), [], /^(\d+)\n/);
    const targetAddress = `127.0.0.1:${target.match[1]}`;
    const ctx = await preparePairs(dir, targetAddress, [], false);
    const m = machineInfo(ctx.go);
    const load0 = loadAverage();
    console.log(`machine: nproc ${m.nproc}, ${m.cpuModel}, Linux ${m.kernel}, Node ${m.node}; Konnectivity ${m.goServer}`);
    console.log(
      `scale: ${o.agents.join(', ')} agents (links from swarm processes of up to ${o.linksPerProcess} each), ${o.connsPerAgent} idle connections per agent, ` +
        `${o.rate} new connections/s for ${o.seconds} s; load average at start ${load0.toFixed(2)}`,
    );
    client = await ClientProcess.start();
    const servers: ServerKind[] = ctx.go === undefined ? ['yurt-tunnel'] : ['yurt-tunnel', 'Konnectivity'];
    const startServer = (kind: ServerKind): Promise<RunningServer> =>
      kind === 'yurt-tunnel' ? startOurServer(ctx, targetAddress) : startGoServer(ctx, targetAddress);
    for (const n of o.agents) {
      for (const kind of servers) {
        process.stdout.write(`${kind}, ${n} agent links ...\n`);
        const server = await startServer(kind);
        try {
          const resumeWindowMs = kind === 'yurt-tunnel' ? DEFAULT_RESUME_WINDOW_MS : 0;
          const swarm = await startSwarm(n, o.linksPerProcess, server.agentPort, join(ctx.dir, 'bench'), resumeWindowMs);
          try {
            await server.agentsConnected(n);
            rows.push({ server: kind, agents: n, agentKind: 'links', processes: swarm.processes, ...(await measure(client, server, o, n)) });
          } finally {
            await swarm.stop();
          }
        } finally {
          await server.stop();
        }
      }
    }
    for (const g of ctx.go === undefined ? [] : o.goAgents) {
      for (const kind of servers) {
        process.stdout.write(`${kind}, ${g} Go agents ...\n`);
        const server = await startServer(kind);
        try {
          const agents = await startGoAgents(ctx, g, server.agentPort);
          try {
            await server.agentsConnected(g);
            const agentsPssMB = agents.pids().reduce((sum, pid) => sum + pssBytes(pid), 0) / MiB;
            const memAvailableMB = memAvailableBytes() / MiB;
            const row = { server: kind, agents: g, agentKind: 'Go agents' as const, processes: agents.processes, ...(await measure(client, server, o, g)) };
            if (agents.exited() > 0) throw new Error(`${agents.exited()} of ${g} Go agents exited during the run`);
            rows.push({ ...row, agentsPssMB, memAvailableMB });
          } finally {
            await agents.stop();
          }
        } finally {
          await server.stop();
        }
      }
    }
    printRows(rows);
    const caption = `nproc ${availableParallelism()}, ${m.cpuModel}, Node ${m.node}, Konnectivity ${m.goServer.split(' ')[0]}; load average ${load0.toFixed(1)} → ${loadAverage().toFixed(1)}; ${new Date().toISOString().slice(0, 10)}`;
    mkdirSync(o.out, { recursive: true });
    const figures = { machine: m, options: o, rows };
    writeFileSync(join(o.out, 'scale.json'), JSON.stringify(figures, null, 1));
    writeFileSync(join(o.out, 'scale.svg'), plot(rows, o, caption));
    console.log(
      `\nload average: ${load0.toFixed(2)} at start, ${loadAverage().toFixed(2)} at the end; written: ${join(o.out, 'scale.json')}, ${join(o.out, 'scale.svg')}`,
    );
    return figures;
  } finally {
    await client?.stop();
    for (const c of children) c.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}
