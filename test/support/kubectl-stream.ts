// A kubectl that streams (logs -f, exec -i) against a test's control plane,
// watched while it runs: its output with arrival times, a wait that fails at
// once when kubectl exits, and the check that a follow stream of the stand-in
// kubelet lost, doubled or reordered no line; and the exec check (with and
// without stdin) the kubectl tests share.

import assert from 'node:assert/strict';
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { once } from 'node:events';
import type { ControlPlane } from './envtest/index.js';
import { waitFor } from './tunnel.js';

export interface Kubectl {
  child: ChildProcessWithoutNullStreams;
  /** stdout so far, and when each piece arrived (performance.now()). */
  out(): string;
  pieces: Array<{ at: number; text: string }>;
  stderr(): string;
  exited: Promise<number | null>;
  /** The exit code once it has exited, else undefined. */
  code: number | null | undefined;
}

export function runKubectl(cp: ControlPlane, args: string[]): Kubectl {
  const child = spawn(cp.bins.kubectl, [`--kubeconfig=${cp.adminKubeconfig}`, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  const pieces: Array<{ at: number; text: string }> = [];
  let err = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (text: string) => pieces.push({ at: performance.now(), text }));
  child.stderr.on('data', (c: Buffer) => (err += c.toString()));
  // A kubectl that exited early fails the test by its exit; a write to its closed stdin must not end the process first.
  child.stdin.on('error', () => {});
  const k: Kubectl = {
    child,
    pieces,
    out: () => pieces.map((p) => p.text).join(''),
    stderr: () => err,
    code: undefined,
    // 'close', not 'exit': all of stdout has been read by then.
    exited: once(child, 'close').then(([code]) => (k.code = code as number | null)),
  };
  return k;
}

/** Waits for `cond`, failing at once (with kubectl's stderr) if kubectl exits first. */
export async function whileRunning(k: Kubectl, what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  await waitFor(
    what,
    () => {
      if (k.code !== undefined) throw new Error(`kubectl exited (${k.code}) while waiting for ${what}: ${k.stderr()}`);
      return cond();
    },
    timeoutMs,
  );
}

/** Stops a kubectl that is still running, and waits for it. */
export async function stopKubectl(k: Kubectl): Promise<void> {
  if (k.code === undefined) k.child.kill('SIGINT');
  await k.exited;
}

/** The first stdout that arrived after `since`, in ms after it. */
export function firstOutputAfter(k: Kubectl, since: number): number | undefined {
  const p = k.pieces.find((x) => x.at >= since);
  return p === undefined ? undefined : p.at - since;
}

/** Lines of the stand-in kubelet's follow stream: "line 1..3" then "follow 1..n", each once, in order; returns n. */
export function checkFollowLines(out: string): number {
  const lines = out.split('\n');
  assert.equal(lines.pop(), '', 'the output ends with a whole line');
  assert.deepEqual(lines.slice(0, 3), ['line 1', 'line 2', 'line 3']);
  const follow = lines.slice(3);
  for (let i = 0; i < follow.length; i++) {
    if (follow[i] !== `follow ${i + 1}`)
      assert.fail(`line ${i + 4} is ${JSON.stringify(follow[i])}, expected "follow ${i + 1}": a line lost, doubled or reordered`);
  }
  return follow.length;
}

/** `kubectl exec` into the stand-in kubelet's p1/c1: `echo words...`, then `cat` with 100 lines of `stdinLine` on -i. */
export async function checkExec(cp: ControlPlane, words: string[], stdinLine: string): Promise<void> {
  const plain = await cp.kubectl(['exec', 'p1', '-c', 'c1', '--', 'echo', ...words]);
  assert.equal(plain.code, 0, plain.stderr);
  // kubectl's complaints (e.g. "Unknown stream id 1, discarding message") say why output is missing.
  assert.equal(plain.stdout, `${words.join(' ')}\n`, plain.stderr);
  const input = `${stdinLine}\n`.repeat(100);
  const interactive = await cp.kubectl(['exec', '-i', 'p1', '-c', 'c1', '--', 'cat'], { input });
  assert.equal(interactive.code, 0, interactive.stderr);
  assert.equal(interactive.stdout, input, interactive.stderr);
}
