// npm run bench -- idle-curve [--pair ours|konnectivity] [--idle 10,40,70] [--rounds N] [--node-args "..."] [--agent-args "..."] [--log DIR]
//
// What a caller after idle minutes sees (a kubectl call comes after the tunnel
// sat quiet): a fresh pair, the bench's warm-up (compare.ts's: bulk, round trips,
// connections, parallel flows), the next `rounds` round trips as the warm
// reference, then for each idle time: sit idle that long, then the next
// `rounds` round trips on a new connection (p50, p99, max) and the server's
// and agent's RSS after the idle; last, their RSS with 1,000 idle connections
// open (1 s after the last opened, as compare.ts's row). One line per step; the load average beside
// it says how much to trust it. `--node-args` passes Node/V8 options to our
// server and agent,
// `--agent-args` flags to our agent (e.g. "--server-probe-interval 0");
// `--log DIR` writes what they print (e.g. --trace-gc) to DIR/server.log and
// DIR/agent.log, with a line "=== <step>" before each step's round trips.

import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChildProcess } from 'node:child_process';
import { ClientProcess } from './client-process.js';
import { parsePairNames, startPair, type Pair, type PairName } from './pairs.js';
import { loadAverage, rssBytes } from './proc.js';
import { percentile } from './stats.js';
import { prepareOnePair, stopOnePair } from './one-pair.js';
import { num, numList, text, UsageError, words, type Scenario } from './options.js';

const MiB = 1024 * 1024;

export const idleCurveScenario: Scenario = {
  name: 'idle-curve',
  summary: 'round trips after 10, 40, 70 s idle (what a kubectl call after idle minutes sees)',
  usage: '[--pair ours|konnectivity] [--idle 10,40,70] [--rounds N] [--node-args "..."] [--agent-args "..."] [--log DIR]',
  options: {
    pair: { type: 'string' },
    idle: { type: 'string' },
    rounds: { type: 'string' },
    'node-args': { type: 'string' },
    'agent-args': { type: 'string' },
    log: { type: 'string' },
  },
  prepare(v) {
    const pair = parsePairNames(text(v, 'pair') ?? 'ours');
    if (pair.length !== 1) throw new UsageError('--pair takes one pair');
    const o: IdleCurveOptions = {
      name: pair[0]!,
      idles: numList(v, 'idle', [10, 40, 70], 0, 600),
      rounds: num(v, 'rounds', 2000, 1, 1_000_000),
      nodeArgs: words(text(v, 'node-args')),
      agentArgs: words(text(v, 'agent-args')),
      logDir: text(v, 'log'),
    };
    return () => runIdleCurve(o);
  },
};

interface IdleCurveOptions {
  name: PairName;
  idles: number[];
  rounds: number;
  nodeArgs: string[];
  agentArgs: string[];
  logDir: string | undefined;
}

async function runIdleCurve({ name, idles, rounds, nodeArgs, agentArgs, logDir }: IdleCurveOptions): Promise<unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'yurt-idle-curve-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  let pair: Pair | undefined;
  try {
    const ctx = await prepareOnePair(dir, children, nodeArgs);
    const log = (who: string, text: string): void => {
      if (logDir !== undefined) appendFileSync(join(logDir, `${who}.log`), text);
    };
    ctx.onOutput = log;
    ctx.agentArgs = agentArgs;
    if (name === 'Konnectivity' && ctx.go === undefined) throw new Error('the Konnectivity binaries are not built (../shared/konnectivity/README.md)');
    client = await ClientProcess.start();
    pair = await startPair(name, ctx);
    const { path, serverPid, agentPid } = pair;
    const c = client;
    const steps: Array<{ step: string; rttP50: number; rttP99: number; rttMax: number; rssServerMB: number; rssAgentMB: number }> = [];
    const measure = async (label: string): Promise<void> => {
      for (const who of ['server', 'agent']) log(who, `=== ${label}\n`);
      const r = await c.call({ op: 'rtt', path, rounds });
      const mb = (pid: number): string => (rssBytes(pid) / MiB).toFixed(1);
      steps.push({
        step: label,
        rttP50: percentile(r, 50),
        rttP99: percentile(r, 99),
        rttMax: Math.max(...r),
        rssServerMB: rssBytes(serverPid) / MiB,
        rssAgentMB: rssBytes(agentPid) / MiB,
      });
      console.log(
        `${label.padEnd(14)} RTT p50 ${percentile(r, 50).toFixed(0)} µs, p99 ${percentile(r, 99).toFixed(0)} µs, ` +
          `max ${Math.max(...r).toFixed(0)} µs; RSS server ${mb(serverPid)} MB, agent ${mb(agentPid)} MB; load ${loadAverage().toFixed(2)}`,
      );
    };
    console.log(`${name}, ${rounds} round trips per step; node args: ${nodeArgs.join(' ') || '(none)'}`);
    await measure('cold');
    await c.call({ op: 'bulk', path, bytes: 64 * MiB });
    await c.call({ op: 'rtt', path, rounds: 2000 });
    await c.call({ op: 'connections', path, rounds: 200 });
    await c.call({ op: 'parallel', path, flows: 4, bytes: 16 * MiB });
    await measure('warm');
    for (const s of idles) {
      await sleep(s * 1000);
      await measure(`after ${s} s idle`);
    }
    await c.call({ op: 'hold', path, count: 1000 });
    await sleep(1000);
    const held = { rssServerMB: rssBytes(serverPid) / MiB, rssAgentMB: rssBytes(agentPid) / MiB };
    console.log(`1,000 idle connections: RSS server ${held.rssServerMB.toFixed(1)} MB, agent ${held.rssAgentMB.toFixed(1)} MB`);
    await c.call({ op: 'release' });
    return { pair: name, rounds, nodeArgs, steps, idleConnections1000: held };
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}
