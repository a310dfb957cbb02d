// requestDeadline: a request's deadline that a garbage collection cannot lose.
// AbortSignal.any([parent, AbortSignal.timeout(ms)]) loses it on Node 20: the
// combined signal and the timeout's timer hold the timeout signal only weakly.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { requestDeadline } from '../../pkg/kube/request-options.js';
import { exposedGc } from '../support/gc.js';

const gc = exposedGc();

/** Waits `ms` with full collections along the way; resolves with whether `signal` aborted. */
async function abortedAfterCollections(signal: AbortSignal, ms: number): Promise<boolean> {
  let aborted = false;
  signal.addEventListener('abort', () => (aborted = true), { once: true });
  for (let waited = 0; waited < ms; waited += 25) {
    gc();
    await sleep(25);
  }
  return aborted;
}

test('the deadline fires after collections, where AbortSignal.any with AbortSignal.timeout can be lost', async () => {
  const parent = new AbortController();
  const deadline = requestDeadline(parent.signal, 100);
  assert.equal(await abortedAfterCollections(deadline.signal, 400), true);
  assert.equal((deadline.signal.reason as DOMException).name, 'TimeoutError');
  deadline.dispose();
});

test("the parent aborts it at once, with the parent's reason; dispose() stops the timer", async () => {
  const parent = new AbortController();
  const deadline = requestDeadline(parent.signal, 60_000);
  parent.abort(new Error('stopped'));
  assert.equal(deadline.signal.aborted, true);
  assert.equal((deadline.signal.reason as Error).message, 'stopped');
  deadline.dispose();

  const early = requestDeadline(undefined, 50);
  early.dispose();
  assert.equal(await abortedAfterCollections(early.signal, 150), false);
});
