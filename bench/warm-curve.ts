// npm run bench -- warm-curve [--batches N] [--node-args "..."]
//
// How fast a fresh server and agent reach their steady cost per connection:
// the real CLIs, the bench's target and client, then batches of 500 new
// connections, 8 at once, the target closing (the bench's "new connections/s"
// row of the compare scenario), and for each batch the server's and agent's CPU per connection
// (utime + stime from /proc). No warm-up: the first batch is the process's
// first 500 connections. Prints one line per run; the load average beside it
// says how much to trust it. `--node-args` passes Node/V8 options to both
// (e.g. --interrupt-budget=N).

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { ClientProcess } from './client-process.js';
import { startPair, type Pair } from './pairs.js';
import { cpuSeconds, loadAverage } from './proc.js';
import { prepareOnePair, stopOnePair } from './one-pair.js';
import { num, text, words, type Scenario } from './options.js';

const BATCH = 500;

export const warmCurveScenario: Scenario = {
  name: 'warm-curve',
  summary: 'CPU per connection of a fresh pair of ours, batch by batch of 500 (how fast V8 warms it)',
  usage: '[--batches N] [--node-args "..."]',
  options: { batches: { type: 'string' }, 'node-args': { type: 'string' } },
  prepare(v) {
    const batches = num(v, 'batches', 8, 1, 1000);
    const nodeArgs = words(text(v, 'node-args'));
    return () => runWarmCurve(batches, nodeArgs);
  },
};

async function runWarmCurve(batches: number, nodeArgs: string[]): Promise<unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'yurt-warm-curve-'));
  const children: ChildProcess[] = [];
  let client: ClientProcess | undefined;
  let pair: Pair | undefined;
  try {
    const ctx = await prepareOnePair(dir, children, nodeArgs);
    client = await ClientProcess.start();
    pair = await startPair('yurt-tunnel', ctx);
    const pids = [pair.serverPid, pair.agentPid];
    const cpu = (): number => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
    const load = loadAverage();
    const perBatch: number[] = [];
    for (let b = 0; b < batches; b++) {
      const before = cpu();
      await client.call({ op: 'rate', path: pair.path, count: BATCH, concurrency: 8, closeBy: 'target' });
      perBatch.push(((cpu() - before) / BATCH) * 1000);
    }
    console.log(`server+agent CPU ms per connection, batches of ${BATCH}: ${perBatch.map((x) => x.toFixed(2)).join(' ')}`);
    console.log(`node args: ${nodeArgs.join(' ') || '(none)'}; load average ${load.toFixed(2)} → ${loadAverage().toFixed(2)}`);
    return { batch: BATCH, nodeArgs, cpuMsPerConnection: perBatch };
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}
