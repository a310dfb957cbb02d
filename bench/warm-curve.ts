// npm run bench:warm-curve -- [--batches N] [--node-args "..."]
//
// How fast a fresh server and agent reach their steady cost per connection:
// the real CLIs, the bench's target and client, then batches of 500 new
// connections, 8 at once, the target closing (the bench's "new connections/s"
// row), and for each batch the server's and agent's CPU per connection
// (utime + stime from /proc). No warm-up: the first batch is the process's
// first 500 connections. Prints one line per run; the load average beside it
// says how much to trust it. `--node-args` passes Node/V8 options to both
// (a budget given there wins over cmd/common/v8-tiering.ts).

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { ClientProcess } from './client-process.js';
import { startPair, type Pair } from './pairs.js';
import { cpuSeconds, loadAverage } from './proc.js';
import { prepareOnePair, runBench, stopOnePair } from './bench-main.js';

const BATCH = 500;

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let batches = 8;
  const nodeArgs: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--batches') batches = Number(args[++i]);
    else if (a === '--node-args') nodeArgs.push(...(args[++i] ?? '').split(' ').filter((x) => x !== ''));
    else throw new Error(`unknown argument ${a}: --batches N, --node-args "..."`);
  }
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
    const perBatch: string[] = [];
    for (let b = 0; b < batches; b++) {
      const before = cpu();
      await client.call({ op: 'rate', path: pair.path, count: BATCH, concurrency: 8, closeBy: 'target' });
      perBatch.push((((cpu() - before) / BATCH) * 1000).toFixed(2));
    }
    console.log(`server+agent CPU ms per connection, batches of ${BATCH}: ${perBatch.join(' ')}`);
    console.log(`node args: ${nodeArgs.join(' ') || '(none)'}; load average ${load.toFixed(2)} → ${loadAverage().toFixed(2)}`);
  } finally {
    await stopOnePair(pair, client, children, dir);
  }
}

runBench('warm-curve', main);
