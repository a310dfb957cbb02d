// The one abortable sleep of the house: node:timers/promises with an
// AbortSignal, unref'd, so a loop that waits between retries never keeps the
// process alive by itself and stops waiting the moment its owner stops.

import { setTimeout as delay } from 'node:timers/promises';

/**
 * Waits `ms`, or until `signal` aborts. Never rejects: resolves true when the
 * whole time passed, false when the signal cut it short (or had already).
 */
export async function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal === undefined) {
    await delay(ms, undefined, { ref: false });
    return true;
  }
  if (signal.aborted) return false;
  try {
    await delay(ms, undefined, { ref: false, signal });
    return true;
  } catch (err: unknown) {
    if (isAbortError(err)) return false;
    throw err;
  }
}

function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}
