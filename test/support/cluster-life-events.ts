// Life events on the local cluster (issue 34 item 7), each with a `kubectl
// logs -f` running against a matrix pod (it prints `line <n>` every 200 ms):
// what the running stream does, and how soon a new `kubectl logs` works. Every
// function returns what it saw, with times in ms from the event; the caller
// asserts.

import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { kubectl, kubectlCommand } from '../../hack/cluster/kubectl.js';

export interface StreamEnd {
  /** kubectl's exit code (null: killed by a signal). */
  code: number | null;
  stderr: string;
  /** When it ended, in ms from the event (set by the caller's `since`). */
  atMs: number;
}

export interface FollowedLogs {
  /** The line numbers seen so far, in order. */
  numbers: number[];
  /** Resolves when kubectl ends by itself (never when stop() ended it). */
  ended: Promise<StreamEnd>;
  /** Resolves once `count` more lines than now came (or false after `ms`). */
  more(count: number, ms: number): Promise<boolean>;
  /** Ends kubectl (SIGTERM); resolves once it is gone. */
  stop(): Promise<void>;
  /** Times in `ended` count from here. */
  since(t0: number): void;
}

/** `kubectl logs -f --tail=1 <pod>`, collecting the numbered lines. */
export function followLogs(pod: string): FollowedLogs {
  const [command, ...prefix] = kubectlCommand();
  const child = spawn(command!, [...prefix, 'logs', '-f', '--tail=1', pod], { stdio: ['ignore', 'pipe', 'pipe'] });
  const numbers: number[] = [];
  let stderr = '';
  let partial = '';
  let t0 = Date.now();
  let stopping = false;
  const waiters = new Set<() => void>();
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    const lines = (partial + d).split('\n');
    partial = lines.pop() ?? '';
    for (const l of lines) {
      const m = /^line (\d+)$/.exec(l);
      if (m !== null) numbers.push(Number(m[1]));
    }
    for (const w of waiters) w();
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const closed = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const ended = new Promise<StreamEnd>((resolve) => {
    void closed.then((code) => {
      if (!stopping) resolve({ code, stderr: stderr.trim(), atMs: Date.now() - t0 });
    });
  });
  return {
    numbers,
    ended,
    async more(count, ms) {
      const want = numbers.length + count;
      const deadline = Date.now() + ms;
      while (numbers.length < want && Date.now() < deadline && child.exitCode === null) {
        await new Promise<void>((resolve) => {
          const done = (): void => {
            waiters.delete(done);
            clearTimeout(timer);
            resolve();
          };
          const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
          waiters.add(done);
        });
      }
      return numbers.length >= want;
    },
    async stop() {
      stopping = true;
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await closed;
    },
    since(at) {
      t0 = at;
    },
  };
}

/** Polls `kubectl logs --tail=1 <pod>` every 250 ms from now; ms until the first success, or undefined after `timeoutMs`. */
export async function logsWorkAfter(pod: string, timeoutMs: number, t0 = Date.now()): Promise<number | undefined> {
  while (Date.now() - t0 < timeoutMs) {
    if ((await kubectl(['logs', '--tail=1', pod], { timeoutMs: 10_000 })).code === 0) return Date.now() - t0;
    await sleep(250);
  }
  return undefined;
}

export interface LogsSample {
  atMs: number;
  ok: boolean;
}

/**
 * `kubectl logs --tail=1 <pod>` every 500 ms from `t0` until `done()` is true
 * after a success (or `timeoutMs`): when each worked or failed.
 */
export async function logsTimeline(pod: string, done: () => Promise<boolean>, timeoutMs: number, t0: number): Promise<LogsSample[]> {
  const samples: LogsSample[] = [];
  while (Date.now() - t0 < timeoutMs) {
    const ok = (await kubectl(['logs', '--tail=1', pod], { timeoutMs: 10_000 })).code === 0;
    samples.push({ atMs: Date.now() - t0, ok });
    if (ok && (await done())) break;
    await sleep(500);
  }
  return samples;
}

/** The longest run of failed samples: from the last success before it (or 0) to the first success after it (or the end). */
export function longestGap(samples: LogsSample[]): { fromMs: number; toMs: number } | undefined {
  let best: { fromMs: number; toMs: number } | undefined;
  let lastOk = 0;
  let failing = false;
  for (const s of samples) {
    if (!s.ok) failing = true;
    else {
      if (failing && (best === undefined || s.atMs - lastOk > best.toMs - best.fromMs)) best = { fromMs: lastOk, toMs: s.atMs };
      failing = false;
      lastOk = s.atMs;
    }
  }
  const end = samples.at(-1)?.atMs ?? 0;
  if (failing && (best === undefined || end - lastOk > best.toMs - best.fromMs)) best = { fromMs: lastOk, toMs: end };
  return best;
}

/** Numbers missing from and repeated in `numbers` between its first and last (a stream that kept every line once has neither). */
export function gapsAndRepeats(numbers: number[]): { missing: number[]; repeated: number[] } {
  const seen = new Set<number>();
  const repeated: number[] = [];
  for (const n of numbers) {
    if (seen.has(n)) repeated.push(n);
    seen.add(n);
  }
  const missing: number[] = [];
  if (numbers.length > 0) for (let n = Math.min(...numbers); n <= Math.max(...numbers) && missing.length < 100; n++) if (!seen.has(n)) missing.push(n);
  return { missing, repeated };
}
