// The driver's handle on the bench client process (bench/client.ts): one
// command at a time, each answered with its result.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { REPO_ROOT } from '../hack/local-tunnel.js';
import type { ClientCommand } from './client.js';
import type { BesideBulkResult, BulkResult, PacedResult, ParallelResult, RateResult } from './client-ops.js';

interface ResultOf {
  bulk: BulkResult;
  rtt: number[];
  connections: number[];
  rate: RateResult;
  parallel: ParallelResult;
  hold: number;
  release: number;
  slow: number;
  paced: PacedResult;
  beside: BesideBulkResult;
}

export class ClientProcess {
  private nextID = 1;
  private readonly waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(private readonly child: ChildProcess) {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line === 'ready') return;
      const msg = JSON.parse(line) as { id: number; result?: unknown; error?: string };
      const w = this.waiting.get(msg.id);
      if (w === undefined) return;
      this.waiting.delete(msg.id);
      if (msg.error !== undefined) w.reject(new Error(`bench client: ${msg.error}`));
      else w.resolve(msg.result);
    });
    child.once('exit', (code) => {
      for (const w of this.waiting.values()) w.reject(new Error(`bench client exited with ${code}`));
      this.waiting.clear();
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  static async start(): Promise<ClientProcess> {
    const child = spawn(process.execPath, [join(REPO_ROOT, 'dist/bench/client.js')], { stdio: ['pipe', 'pipe', 'inherit'] });
    const [first] = (await once(child.stdout, 'data')) as [Buffer];
    if (!first.toString().startsWith('ready')) throw new Error(`bench client: unexpected first line ${first.toString()}`);
    return new ClientProcess(child);
  }

  call<C extends ClientCommand>(cmd: C): Promise<ResultOf[C['op']]> {
    const id = this.nextID++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.stdin!.write(JSON.stringify({ id, cmd }) + '\n');
    });
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    this.child.stdin!.end();
    await once(this.child, 'exit');
  }
}
