// The server + agent pairs the bench compares, each started alone and
// stopped before the next one starts, all with certificates from one local CA
// made once per run:
//   yurt-tunnel                 our server and our agent (the real CLIs)
//   yurt-tunnel, resume off     the same with --resume-window 0 on both (what session resume costs)
//   yurt-tunnel, WebSocket      the same with --transport websocket on the agent (what the WebSocket transport costs)
//   Konnectivity                the v0.30 Go proxy-server and proxy-agent
//   Go agent, our server        our server with the Go proxy-agent joined to it
// A pair is ready when its server has logged the agent's arrival; no
// connection has been made through it yet (the cold figures need that).

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { ensureLocalServerCertificates } from '../pkg/certs/local-store.js';
import { findKonnectivity, goAgentArgs, goServerArgs, type KonnectivityBinaries } from '../hack/konnectivity.js';
import { freeLowPort } from '../hack/ports.js';
import { issueAgentCertificate, startLocalTunnel } from '../hack/local-tunnel.js';
import type { BenchPath } from './lean-conn.js';
import { UsageError } from './options.js';

export type PairName = 'yurt-tunnel' | 'yurt-tunnel, resume off' | 'yurt-tunnel, WebSocket' | 'Konnectivity' | 'Go agent, our server';

/** The pairs by the names the options take (--only, --pair). */
export const PAIR_OPTION_NAMES: Readonly<Record<string, PairName>> = {
  ours: 'yurt-tunnel',
  'ours-noresume': 'yurt-tunnel, resume off',
  'ours-ws': 'yurt-tunnel, WebSocket',
  konnectivity: 'Konnectivity',
  'go-agent': 'Go agent, our server',
};

/** "ours,konnectivity" as pair names; an unknown name is a UsageError. */
export function parsePairNames(list: string): PairName[] {
  return list.split(',').map((n) => {
    const p = PAIR_OPTION_NAMES[n];
    if (p === undefined) throw new UsageError(`unknown pair ${n} (${Object.keys(PAIR_OPTION_NAMES).join(', ')})`);
    return p;
  });
}

/** The order of round `round` (from 0): ABC, BCA, CAB, … so that no pair always runs first or last. */
export function rotation<T>(items: readonly T[], round: number): T[] {
  return items.map((_, i) => items[(i + round) % items.length]!);
}

export interface Pair {
  name: PairName;
  /** How the client reaches the target through this pair. */
  path: BenchPath;
  serverPid: number;
  agentPid: number;
  stop(): Promise<void>;
}

export interface PairContext {
  /** A temp dir of the run: the local CA in pki/, agent certificates beside it. */
  dir: string;
  certDir: string;
  targetAddress: string;
  go: KonnectivityBinaries | undefined;
  /** Node.js options for our server and agent (e.g. --cpu-prof), to profile them under the bench's load. */
  nodeArgs: string[];
  /** Extra flags for our agent (e.g. --server-probe-interval 0, to see what its probes cost). */
  agentArgs?: string[];
  /** Extra flags for our server. */
  serverArgs?: string[];
  /** Extra environment for our server and agent (e.g. LD_PRELOAD of jemalloc, as the image runs them). */
  env: NodeJS.ProcessEnv;
  verbose: boolean;
  /** Sees what our server and agent print (bench/profile.ts reads its probe's lines from it). */
  onOutput?: (who: 'server' | 'agent', text: string) => void;
  /** The port every pair's agent dials, given its server's agent port (bench/slow-link.ts puts a slow link there). Default the server's own. */
  agentDialPort?: (agentPort: number) => Promise<number>;
  /** Our scripts, instead of the bundles that ship (bench/cold-start.ts runs tsc's modules to compare). */
  serverBin?: string;
  agentBin?: string;
}

/** The CA and one agent certificate per pair, made once so that no pair pays for key generation. */
export async function preparePairs(
  dir: string,
  targetAddress: string,
  nodeArgs: string[],
  verbose: boolean,
  env: NodeJS.ProcessEnv = {},
): Promise<PairContext> {
  const certDir = join(dir, 'pki');
  await ensureLocalServerCertificates({ certDir });
  for (const name of ['bench', 'go-pair', 'go-agent']) await issueAgentCertificate(certDir, name, join(dir, name));
  const go = findKonnectivity();
  return { dir, certDir, targetAddress, go: typeof go === 'string' ? undefined : go, nodeArgs, env, verbose };
}

/** Waits for `pattern` in what a process prints (stdout and stderr). */
function waitForOutput(child: ChildProcess, pattern: RegExp, what: string, echo: boolean): Promise<void> {
  let out = '';
  let seen = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: not seen within 30 s:\n${out.slice(-2000)}`)), 30_000);
    timer.unref();
    const onText = (b: Buffer): void => {
      // Once seen, the pipes are only drained: the Go binaries log every
      // connection, and matching what follows against all that came before
      // once took a quarter of the machine from the pair being measured.
      if (seen) {
        if (echo) process.stderr.write(`[${what}] ${b.toString()}`);
        return;
      }
      const text = b.toString();
      if (echo) process.stderr.write(`[${what}] ${text}`);
      if (out.length < 1_000_000) out += text;
      if (pattern.test(out)) {
        seen = true;
        clearTimeout(timer);
        out = '';
        resolve();
      }
    };
    child.stdout!.on('data', onText);
    child.stderr!.on('data', onText);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited with ${code}:\n${out.slice(-2000)}`));
    });
  });
}

function spawnPiped(children: ChildProcess[], bin: string, args: string[]): ChildProcess {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  return child;
}

async function stopChildren(children: ChildProcess[]): Promise<void> {
  for (const c of [...children].reverse()) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    c.kill('SIGTERM');
    const timer = setTimeout(() => c.kill('SIGKILL'), 10_000);
    await once(c, 'exit');
    clearTimeout(timer);
  }
}

async function startGoAgent(children: ChildProcess[], ctx: PairContext, serverPort: number, agentID: string): Promise<ChildProcess> {
  const dialPort = (await ctx.agentDialPort?.(serverPort)) ?? serverPort;
  const args = goAgentArgs(join(ctx.dir, agentID), dialPort, agentID, `host=${agentID}&ipv4=127.0.0.1`, await freeLowPort(), await freeLowPort());
  const child = spawnPiped(children, ctx.go!.proxyAgent, args);
  // Drain its log; readiness is judged by the server.
  child.stdout!.resume();
  child.stderr!.resume();
  return child;
}

/**
 * Our server and agent; `resume` false starts both with --resume-window 0.
 * Either way the agent's "connected" line must say whether a session was
 * offered, and it must be what was asked for: a pair that measured the wrong
 * thing would go unnoticed in the table.
 */
const logLines = (text: string): string =>
  text
    .split('\n')
    .filter((l) => /^[IWEF]\d{4} /.test(l))
    .map((l) => `${l}\n`)
    .join('');

async function startOurs(ctx: PairContext, resume: boolean, transport: 'grpc' | 'websocket' = 'grpc'): Promise<Pair> {
  const off = resume ? [] : ['--resume-window', '0'];
  const transportArgs = ['--transport', transport];
  let agentText = '';
  const local = await startLocalTunnel({
    nodeName: 'bench',
    certDir: ctx.certDir,
    agentDir: join(ctx.dir, 'bench'),
    serverArgs: [...off, ...(ctx.serverArgs ?? [])],
    agentArgs: [...off, ...transportArgs, ...(ctx.agentArgs ?? [])],
    serverNodeArgs: ctx.nodeArgs,
    agentNodeArgs: ctx.nodeArgs,
    serverEnv: ctx.env,
    agentEnv: ctx.env,
    ...(ctx.agentDialPort !== undefined ? { agentDialPort: ctx.agentDialPort } : {}),
    serverBin: ctx.serverBin,
    agentBin: ctx.agentBin,
    onOutput: (who, text) => {
      if (ctx.verbose) process.stderr.write(`[${who}] ${text}`);
      // Only the agent's own log lines: V8 traces (node args) would fill the cap first.
      if (who === 'agent' && agentText.length < 100_000) agentText += logLines(text);
      ctx.onOutput?.(who, text);
    },
  });
  const offered = /connected to tunnel server.*?sessionResume\W+(true|false)/s.exec(agentText)?.[1];
  const carried = /connected to tunnel server.*?transport\W+(grpc|websocket)/s.exec(agentText)?.[1];
  if (carried !== transport) {
    await local.stop();
    throw new Error(`our pair over ${transport}: the agent's "connected" line says transport=${carried ?? '(not found)'}:\n${agentText.slice(-2000)}`);
  }
  if (offered !== String(resume)) {
    await local.stop();
    throw new Error(
      `our pair with resume ${resume ? 'on' : 'off'}: the agent's "connected" line says sessionResume=${offered ?? '(not found)'}:\n${agentText.slice(-2000)}`,
    );
  }
  return {
    name: transport === 'websocket' ? 'yurt-tunnel, WebSocket' : resume ? 'yurt-tunnel' : 'yurt-tunnel, resume off',
    path: { kind: 'connect', uds: local.udsPath, address: ctx.targetAddress, proxyHost: 'bench' },
    serverPid: local.children[0]!.pid!,
    agentPid: local.children[1]!.pid!,
    stop: () => local.stop(),
  };
}

async function startGoAgentOnOurs(ctx: PairContext): Promise<Pair> {
  let onServerText: ((text: string) => void) | undefined;
  const local = await startLocalTunnel({
    certDir: ctx.certDir,
    agent: false,
    serverNodeArgs: ctx.nodeArgs,
    serverEnv: ctx.env,
    onOutput: (who, text) => {
      if (ctx.verbose) process.stderr.write(`[${who}] ${text}`);
      ctx.onOutput?.(who, text);
      onServerText?.(text);
    },
  });
  try {
    const joined = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the Go agent did not join our server within 30 s')), 30_000);
      onServerText = (text) => {
        if (/agent connected/.test(text)) {
          clearTimeout(timer);
          onServerText = undefined;
          resolve();
        }
      };
    });
    const agent = await startGoAgent(local.children, ctx, local.agentPort, 'go-agent');
    await joined;
    return {
      name: 'Go agent, our server',
      path: { kind: 'connect', uds: local.udsPath, address: ctx.targetAddress, proxyHost: 'go-agent' },
      serverPid: local.children[0]!.pid!,
      agentPid: agent.pid!,
      stop: () => local.stop(),
    };
  } catch (err: unknown) {
    await local.stop();
    throw err;
  }
}

async function startKonnectivity(ctx: PairContext): Promise<Pair> {
  const children: ChildProcess[] = [];
  const udsPath = join(ctx.dir, `konnectivity-${process.pid}.sock`);
  try {
    const ports = { agentPort: await freeLowPort(), healthPort: await freeLowPort(), adminPort: await freeLowPort() };
    const server = spawnPiped(children, ctx.go!.proxyServer, goServerArgs(ctx.certDir, udsPath, ports));
    await waitForOutput(server, /Starting agent server for tunnel connections/, 'proxy-server', ctx.verbose);
    const joined = waitForOutput(server, /"Agent connected"/, 'proxy-server', ctx.verbose);
    const agent = await startGoAgent(children, ctx, ports.agentPort, 'go-pair');
    await joined;
    return {
      name: 'Konnectivity',
      path: { kind: 'connect', uds: udsPath, address: ctx.targetAddress, proxyHost: 'go-pair' },
      serverPid: server.pid!,
      agentPid: agent.pid!,
      stop: () => stopChildren(children),
    };
  } catch (err: unknown) {
    await stopChildren(children);
    throw err;
  }
}

/** The pairs this machine can run, in the order each round runs them. */
export function pairNames(ctx: PairContext): PairName[] {
  const ours: PairName[] = ['yurt-tunnel', 'yurt-tunnel, resume off', 'yurt-tunnel, WebSocket'];
  return ctx.go === undefined ? ours : [...ours, 'Konnectivity', 'Go agent, our server'];
}

export function startPair(name: PairName, ctx: PairContext): Promise<Pair> {
  switch (name) {
    case 'yurt-tunnel':
      return startOurs(ctx, true);
    case 'yurt-tunnel, resume off':
      return startOurs(ctx, false);
    case 'yurt-tunnel, WebSocket':
      return startOurs(ctx, true, 'websocket');
    case 'Konnectivity':
      return startKonnectivity(ctx);
    case 'Go agent, our server':
      return startGoAgentOnOurs(ctx);
  }
}
