// npm run bench -- cold-start [--rounds N] [--log PREFIX] [--warm-client] 'label|node args|server+agent flags[|warm round trips[|entry]]' ...
//
// The cold figures of fresh pairs, configurations alternated round by round
// (e.g. 'off||' 'on||--startup-rehearsal'): for each pair, the time to
// ready and the CPU and RSS of server and agent at ready; the first connection
// (CONNECT → 200 → echo); the first 2,000 round trips (p50, p99, max, and how
// many took over 1 ms in each 500, in order); the CPU server and agent spent
// on each (/proc, 10 ms ticks); their RSS after. The client and target are
// warmed on the direct path first, as the compare scenario does. With --log PREFIX,
// what server and agent print goes to PREFIX.<label>.{server,agent}, each line
// stamped with ms since the pair started, and `@@ <ms> first-conn|rtt-start|
// rtt-end` marks the windows: run with node args '--trace-opt --trace-deopt
// --trace-gc' to see what V8 compiled, threw away and collected in each. Each
// round trip over 1 ms is marked too (`@@ <ms> slow #<i> <µs>`, its estimated
// start), at the end of the log. A fourth field warms the pair before it is
// measured ('warm|||20000': 20 connections, then 20,000 round trips): the
// floor at the machine's load of the moment, to hold the cold figures against.
// --warm-client warms the client on a throwaway pair first (its path through a
// pair, CONNECT over a Unix socket, is not the direct one it is warmed on).
// A fifth field picks what runs: bundle (the default: dist/bin, what ships) or
// modules (tsc's dist/cmd, each module a file): 'bundle||' 'modules|||0|modules'.

import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { MODULE_AGENT_BIN, MODULE_SERVER_BIN } from '../hack/cli-bins.js';
import { ClientProcess } from './client-process.js';
import { startPair, type Pair } from './pairs.js';
import { percentile } from './stats.js';
import { cpuSeconds, loadAverage, rssBytes } from './proc.js';
import { prepareOnePair, stopOnePair } from './one-pair.js';
import { flag, num, text, UsageError, words, type Scenario } from './options.js';

const MiB = 1024 * 1024;

interface Config {
  label: string;
  nodeArgs: string[];
  flags: string[];
  /** Round trips (and 20 connections) driven through the pair before it is measured: a warm pair to compare with. */
  warm: number;
  /** The bundles (dist/bin) or tsc's modules (dist/cmd). */
  entry: 'bundle' | 'modules';
}

const mb = (pid: number): string => (rssBytes(pid) / 1e6).toFixed(1);

async function one(c: Config, log: string | undefined, warmClient: boolean): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'yurt-cold-start-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  let pair: Pair | undefined;
  try {
    const ctx = await prepareOnePair(dir, children, c.nodeArgs);
    ctx.serverArgs = c.flags;
    ctx.agentArgs = c.flags;
    if (c.entry === 'modules') {
      ctx.serverBin = MODULE_SERVER_BIN;
      ctx.agentBin = MODULE_AGENT_BIN;
    }
    const t0 = performance.now();
    const stamp = (): string => (performance.now() - t0).toFixed(1);
    const mark = (what: string): void => {
      if (log !== undefined) for (const who of ['server', 'agent']) appendFileSync(`${log}.${c.label}.${who}`, `@@ ${stamp()} ${what}\n`);
    };
    if (log !== undefined) {
      ctx.onOutput = (who, text) =>
        appendFileSync(
          `${log}.${c.label}.${who}`,
          text
            .split('\n')
            .filter((l) => l !== '')
            .map((l) => `${stamp()} ${l}\n`)
            .join(''),
        );
    }
    client = await ClientProcess.start();
    const direct = { kind: 'tcp' as const, port: Number(ctx.targetAddress.split(':')[1]) };
    await client.call({ op: 'bulk', path: direct, bytes: 64 * MiB });
    await client.call({ op: 'rtt', path: direct, rounds: 2000 });
    await client.call({ op: 'connections', path: direct, rounds: 200 });
    if (warmClient) {
      // The client's own path through a pair (CONNECT over a Unix socket) is not the direct one: warm it on a throwaway pair.
      const off = ['--startup-rehearsal=false'];
      const w = await startPair('yurt-tunnel', { ...ctx, onOutput: undefined, serverArgs: off, agentArgs: off });
      try {
        await client.call({ op: 'connections', path: w.path, rounds: 20 });
        await client.call({ op: 'rtt', path: w.path, rounds: 2000 });
      } finally {
        await w.stop();
      }
    }
    const started = performance.now();
    pair = await startPair('yurt-tunnel', ctx);
    const p = pair;
    const readyMs = performance.now() - started;
    const cpu = (): number[] => [cpuSeconds(p.serverPid) * 1000, cpuSeconds(p.agentPid) * 1000];
    const atReady = cpu();
    const rssAtReady = `${mb(p.serverPid)}/${mb(p.agentPid)}`;
    const load = loadAverage();
    if (c.warm > 0) {
      await client.call({ op: 'connections', path: p.path, rounds: 20 });
      await client.call({ op: 'rtt', path: p.path, rounds: c.warm });
    }
    mark('first-conn');
    const [first] = await client.call({ op: 'connections', path: p.path, rounds: 1 });
    mark('rtt-start');
    const rttStart = performance.now() - t0;
    const afterFirst = cpu();
    const r = await client.call({ op: 'rtt', path: p.path, rounds: 2000 });
    mark('rtt-end');
    if (log !== undefined) {
      // Where each round trip over 1 ms fell, on the log's clock: the client sends the next byte as soon as one
      // is back, so the sum of the round trips before it is close to its start (a little early).
      let at = rttStart;
      const lines = r.map((x, i) => {
        const line = x > 1000 ? `@@ ${at.toFixed(1)} slow #${i} ${x.toFixed(0)} µs\n` : '';
        at += x / 1000;
        return line;
      });
      lines.push(`@@ ${at.toFixed(1)} rtt-sum-end\n`);
      for (const who of ['server', 'agent']) appendFileSync(`${log}.${c.label}.${who}`, lines.join(''));
    }
    const afterRtt = cpu();
    const slow = [0, 0, 0, 0];
    r.forEach((x, i) => {
      if (x > 1000) slow[Math.floor(i / 500)]!++;
    });
    const spent = (a: number[], b: number[]): string => `${(b[0]! - a[0]!).toFixed(0)}/${(b[1]! - a[1]!).toFixed(0)}`;
    console.log(
      `${c.label.padEnd(10)} ready ${readyMs.toFixed(0)} ms (CPU s/a ${atReady.map((x) => x.toFixed(0)).join('/')} ms, RSS ${rssAtReady} MB) | ` +
        `first ${first!.toFixed(1)} ms (CPU s/a ${spent(atReady, afterFirst)}) | RTT p50 ${percentile(r, 50).toFixed(0)} p99 ${percentile(r, 99).toFixed(0)} ` +
        `max ${Math.max(...r).toFixed(0)} µs, >1 ms per 500 ${slow.join('/')} (CPU s/a ${spent(afterFirst, afterRtt)}) | RSS after ${mb(p.serverPid)}/${mb(p.agentPid)} MB | load ${load.toFixed(1)}`,
    );
    return {
      label: c.label,
      readyMs,
      cpuAtReadyMs: atReady,
      firstConnMs: first,
      rttP50: percentile(r, 50),
      rttP99: percentile(r, 99),
      rttMax: Math.max(...r),
      over1msPer500: slow,
      load,
    };
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}

export const coldStartScenario: Scenario = {
  name: 'cold-start',
  summary: "the cold figures of fresh pairs of ours, configurations alternated (default: the rehearsal 'off' and 'on')",
  usage: "[--rounds N] [--log PREFIX] [--warm-client] ['label|node args|server+agent flags[|warm round trips[|bundle or modules]]' ...]",
  options: { rounds: { type: 'string' }, log: { type: 'string' }, 'warm-client': { type: 'boolean' } },
  positionals: true,
  prepare(v, positionals) {
    const rounds = num(v, 'rounds', 3, 1, 100);
    const configs: Config[] = positionals.map((a) => {
      const [label, nodeArgs, flags, warm, entry = 'bundle'] = a.split('|');
      if (label === undefined || label === '' || !(Number(warm || 0) >= 0) || (entry !== 'bundle' && entry !== 'modules')) {
        throw new UsageError(`a configuration is 'label|node args|server+agent flags[|warm round trips[|bundle or modules]]', not ${a}`);
      }
      return { label, nodeArgs: words(nodeArgs), flags: words(flags), warm: Number(warm || 0), entry };
    });
    if (configs.length === 0)
      configs.push(
        { label: 'off', nodeArgs: [], flags: [], warm: 0, entry: 'bundle' },
        { label: 'on', nodeArgs: [], flags: ['--startup-rehearsal'], warm: 0, entry: 'bundle' },
      );
    const log = text(v, 'log');
    const warmClient = flag(v, 'warm-client');
    return async () => {
      const runs: Array<Record<string, unknown>> = [];
      for (let i = 0; i < rounds; i++) for (const c of configs) runs.push(await one(c, log, warmClient));
      return { rounds, runs };
    };
  },
};
