// npm run bench:idle-curve -- [--pair ours|konnectivity] [--idle 10,40,70] [--rounds N] [--node-args "..."] [--agent-args "..."] [--log DIR]
//
// What a caller after idle minutes sees (a kubectl call comes after the tunnel
// sat quiet): a fresh pair, the bench's warm-up (run.ts's: bulk, round trips,
// connections, parallel flows), the next `rounds` round trips as the warm
// reference, then for each idle time: sit idle that long, then the next
// `rounds` round trips on a new connection (p50, p99, max) and the server's
// and agent's RSS after the idle; last, their RSS with 1,000 idle connections
// open (1 s after the last opened, as run.ts's row). One line per step; the load average beside
// it says how much to trust it. `--node-args` passes Node/V8 options to our
// server and agent (those given there win over cmd/common/v8-tiering.ts),
// `--agent-args` flags to our agent (e.g. "--server-probe-interval 0");
// `--log DIR` writes what they print (e.g. --trace-gc) to DIR/server.log and
// DIR/agent.log, with a line "=== <step>" before each step's round trips.

import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChildProcess } from 'node:child_process';
import { ClientProcess } from './client-process.js';
import { startPair, type Pair, type PairName } from './pairs.js';
import { loadAverage, rssBytes } from './proc.js';
import { percentile } from './stats.js';
import { prepareOnePair, runBench, stopOnePair } from './bench-main.js';

const MiB = 1024 * 1024;

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let name: PairName = 'yurt-tunnel';
  let idles = [10, 40, 70];
  let rounds = 2000;
  const nodeArgs: string[] = [];
  let logDir: string | undefined;
  const agentArgs: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--pair') name = args[++i] === 'konnectivity' ? 'Konnectivity' : 'yurt-tunnel';
    else if (a === '--idle') idles = (args[++i] ?? '').split(',').map(Number);
    else if (a === '--rounds') rounds = Number(args[++i]);
    else if (a === '--node-args') nodeArgs.push(...(args[++i] ?? '').split(' ').filter((x) => x !== ''));
    else if (a === '--log') logDir = args[++i];
    else if (a === '--agent-args') agentArgs.push(...(args[++i] ?? '').split(' ').filter((x) => x !== ''));
    else throw new Error(`unknown argument ${a}: --pair ours|konnectivity, --idle 10,40,70, --rounds N, --node-args "...", --agent-args "...", --log DIR`);
  }
  if (idles.some((s) => !Number.isFinite(s) || s < 0 || s > 600)) throw new Error('--idle takes seconds between 0 and 600, comma-separated');
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
    const measure = async (label: string): Promise<void> => {
      for (const who of ['server', 'agent']) log(who, `=== ${label}\n`);
      const r = await c.call({ op: 'rtt', path, rounds });
      const mb = (pid: number): string => (rssBytes(pid) / MiB).toFixed(1);
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
    console.log(`1,000 idle connections: RSS server ${(rssBytes(serverPid) / MiB).toFixed(1)} MB, agent ${(rssBytes(agentPid) / MiB).toFixed(1)} MB`);
    await c.call({ op: 'release' });
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}

runBench('idle-curve', main);
