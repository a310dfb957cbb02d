// The one abortable sleep of the house: node:timers/promises with an
// AbortSignal. Unref'd by default, so a loop that waits between retries never
// keeps the process alive by itself, and it stops waiting the moment its
// owner stops. A grace period that someone awaits (a shutdown waiting for
// its connections) is ref'd instead: it must end with an answer, not with
// the process running out of things to do.

import { setTimeout as delay } from 'node:timers/promises';

export interface SleepOptions {
  /** Keep the process alive while waiting. Default false. */
  ref?: boolean;
}

/**
 * Waits `ms`, or until `signal` aborts. Never rejects: resolves true when the
 * whole time passed, false when the signal cut it short (or had already).
 */
export async function sleep(ms: number, signal?: AbortSignal, opts: SleepOptions = {}): Promise<boolean> {
  const ref = opts.ref ?? false;
  if (signal === undefined) {
    await delay(ms, undefined, { ref });
    return true;
  }
  if (signal.aborted) return false;
  try {
    await delay(ms, undefined, { ref, signal });
    return true;
  } catch (err: unknown) {
    if (isAbortError(err)) return false;
    throw err;
  }
}

function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}

/**
 * Waits for `work` to settle, at most `ms` (a grace period: ref'd): true if
 * it did in time. The timer goes as soon as either comes.
 */
export async function within(work: Promise<unknown>, ms: number): Promise<boolean> {
  const done = new AbortController();
  const finished = work.then(
    () => true,
    () => true,
  );
  void finished.then(() => done.abort());
  const timedOut = sleep(ms, done.signal, { ref: true }).then(() => false);
  return Promise.race([finished, timedOut]);
}
