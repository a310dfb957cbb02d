// Per-test cleanup and leak checks. `harness(t)` registers one after-hook that
// runs the deferred closers (last first) and then waits until the process's
// active handles are back to what they were when the test started.

import type { TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

export type ResourceCounts = Map<string, number>;

export function activeResources(): ResourceCounts {
  const counts: ResourceCounts = new Map();
  for (const r of process.getActiveResourcesInfo()) counts.set(r, (counts.get(r) ?? 0) + 1);
  return counts;
}

function diff(before: ResourceCounts, now: ResourceCounts): string[] {
  const extra: string[] = [];
  for (const [k, n] of now) {
    const b = before.get(k) ?? 0;
    if (n > b) extra.push(`${k} +${n - b}`);
  }
  return extra;
}

/**
 * Waits (up to `timeoutMs`) until no resource type has more instances than in
 * `before`, and throws naming what is left. It returns as soon as all is
 * closed, so the long limit costs nothing then: on a machine at load 16 a
 * socket's close was once seen to take longer than 3 s.
 */
export async function expectNoLeftovers(before: ResourceCounts, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    // Our own sleep timer shows up as a Timeout; measure before sleeping.
    const extra = diff(before, activeResources());
    if (extra.length === 0) return;
    if (Date.now() > deadline) throw new Error(`resources left open after the test: ${extra.join(', ')}`);
    await sleep(20);
  }
}

export interface Harness {
  /** Runs `fn` at the end of the test, before the leak check; last deferred runs first. */
  defer(fn: () => unknown): void;
}

export function harness(t: TestContext, opts: { leakCheck?: boolean } = {}): Harness {
  const before = activeResources();
  const closers: Array<() => unknown> = [];
  t.after(async () => {
    const errors: unknown[] = [];
    for (const fn of closers.reverse()) {
      try {
        await fn();
      } catch (err: unknown) {
        errors.push(err);
      }
    }
    if (errors.length > 0) throw new AggregateError(errors, 'cleanup failed');
    if (opts.leakCheck !== false) await expectNoLeftovers(before);
  });
  return { defer: (fn) => closers.push(fn) };
}

/**
 * Cleanup for what a whole file shares (a control plane, a server started in
 * `before`): closers run last first when `close()` is called from `after`.
 */
export function suiteHarness(): Harness & { close(): Promise<void> } {
  const closers: Array<() => unknown> = [];
  return {
    defer: (fn) => closers.push(fn),
    async close() {
      const errors: unknown[] = [];
      for (const fn of closers.splice(0).reverse()) {
        try {
          await fn();
        } catch (err: unknown) {
          errors.push(err);
        }
      }
      if (errors.length > 0) throw new AggregateError(errors, 'cleanup failed');
    },
  };
}
