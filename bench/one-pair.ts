// What the scenarios that drive one pair at a time do around their work:
// start the target and prepare the pairs, and stop the pair, its client and
// its helper processes and remove its folder whatever happened.

import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT, startProcess } from '../hack/local-tunnel.js';
import type { ClientProcess } from './client-process.js';
import { preparePairs, type Pair, type PairContext } from './pairs.js';

/** Stops what a one-pair scenario started: the pair, the client, the other processes (the target), and its folder. */
export async function stopOnePair(pair: Pair | undefined, client: ClientProcess | undefined, children: readonly ChildProcess[], dir: string): Promise<void> {
  await pair?.stop();
  await client?.stop();
  for (const c of children) c.kill('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}

/** Starts the bench target (kept in `children`) and prepares the pairs' certificates and flags in `dir` to reach it. */
export async function prepareOnePair(dir: string, children: ChildProcess[], nodeArgs: string[]): Promise<PairContext> {
  const target = await startProcess(children, join(REPO_ROOT, 'dist/bench/target.js'), [], /^(\d+)\n/);
  return preparePairs(dir, `127.0.0.1:${target.match[1]}`, nodeArgs, false);
}
