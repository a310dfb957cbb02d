// The bench client, a process of its own so that its CPU is neither the
// server's nor the driver's. It takes one JSON command per line on stdin and
// answers each with one JSON line on stdout ({id, result} or {id, error}),
// one command at a time: the driver reads the server's and agent's CPU
// counters right before a command and right after its answer.

import { createInterface } from 'node:readline';
import { bulk, connectionRate, echoBesideBulk, hold, newConnections, paced, parallel, release, rtt, slowReader } from './client-ops.js';
import type { BenchPath } from './lean-conn.js';

export type ClientCommand =
  | { op: 'bulk'; path: BenchPath; bytes: number }
  | { op: 'rtt'; path: BenchPath; rounds: number }
  | { op: 'connections'; path: BenchPath; rounds: number; samplesFile?: string; label?: string }
  | { op: 'rate'; path: BenchPath; count: number; concurrency: number; closeBy: 'target' | 'client' }
  | { op: 'parallel'; path: BenchPath; flows: number; bytes: number }
  | { op: 'hold'; path: BenchPath; count: number }
  | { op: 'release' }
  | { op: 'slow'; path: BenchPath; bytes: number; bytesPerSecond: number }
  | { op: 'paced'; path: BenchPath; perSecond: number; seconds: number }
  | { op: 'beside'; path: BenchPath; bytes: number; everyMs: number };

function run(cmd: ClientCommand): Promise<unknown> {
  switch (cmd.op) {
    case 'bulk':
      return bulk(cmd.path, cmd.bytes);
    case 'rtt':
      return rtt(cmd.path, cmd.rounds);
    case 'connections':
      return newConnections(cmd.path, cmd.rounds, cmd.samplesFile === undefined ? undefined : { file: cmd.samplesFile, label: cmd.label ?? '' });
    case 'rate':
      return connectionRate(cmd.path, cmd.count, cmd.concurrency, cmd.closeBy);
    case 'parallel':
      return parallel(cmd.path, cmd.flows, cmd.bytes);
    case 'hold':
      return hold(cmd.path, cmd.count);
    case 'release':
      return release();
    case 'slow':
      return slowReader(cmd.path, cmd.bytes, cmd.bytesPerSecond);
    case 'paced':
      return paced(cmd.path, cmd.perSecond, cmd.seconds);
    case 'beside':
      return echoBesideBulk(cmd.path, cmd.bytes, cmd.everyMs);
  }
}

const lines = createInterface({ input: process.stdin });
let queue = Promise.resolve();
lines.on('line', (line) => {
  const { id, cmd } = JSON.parse(line) as { id: number; cmd: ClientCommand };
  queue = queue.then(async () => {
    try {
      process.stdout.write(JSON.stringify({ id, result: await run(cmd) }) + '\n');
    } catch (err: unknown) {
      process.stdout.write(JSON.stringify({ id, error: err instanceof Error ? err.message : String(err) }) + '\n');
    }
  });
});
lines.on('close', () => process.exit(0));
process.stdout.write('ready\n');
