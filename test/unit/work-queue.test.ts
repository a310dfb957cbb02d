import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkQueue } from '../../pkg/kube/work-queue.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { waitFor } from '../support/tunnel.js';

const backoff = { initialMs: 5, factor: 2, jitter: 0, capMs: 20 };

test('a burst of adds is one sync; an add during a sync syncs again once', async (t) => {
  const h = harness(t);
  const synced: string[] = [];
  let release: (() => void) | undefined;
  const q = new WorkQueue({
    name: 't',
    logger: new MemoryLogger(),
    sync: async (key) => {
      synced.push(key);
      if (key === 'slow') await new Promise<void>((r) => (release = r));
    },
  });
  h.defer(() => q.stop());
  for (let i = 0; i < 100; i++) q.add('a');
  q.add('b');
  await waitFor('a and b', () => synced.length === 2);
  assert.deepEqual(synced, ['a', 'b']);
  q.add('slow');
  await waitFor('slow to start', () => release !== undefined);
  q.add('slow');
  q.add('slow');
  release!();
  await waitFor('slow again', () => synced.length === 4);
  release!();
  await q.stop();
  assert.deepEqual(synced, ['a', 'b', 'slow', 'slow']);
});

test('a failing key is retried with backoff, then dropped with one error line; the next add brings it back', async (t) => {
  const h = harness(t);
  const log = new MemoryLogger();
  let calls = 0;
  const q = new WorkQueue({
    name: 't',
    logger: log,
    maxRetries: 3,
    backoff,
    sync: async () => {
      calls++;
      throw Object.assign(new Error('conflict'), { code: 409 });
    },
  });
  h.defer(() => q.stop());
  q.add('k');
  await waitFor('the drop', () => log.find('dropped until the next change').length === 1, 2000);
  assert.equal(calls, 4);
  assert.equal(log.find('sync failed; retrying').length, 3);
  assert.match(String(log.find('dropped until the next change')[0]!.fields.error), /HTTP 409: conflict/);
  q.add('k');
  await waitFor('the next attempt', () => calls >= 5);
});

test('stop drops what waits and cancels retries; adds after it are ignored', async (t) => {
  harness(t);
  let calls = 0;
  const q = new WorkQueue({
    name: 't',
    logger: new MemoryLogger(),
    backoff: { ...backoff, initialMs: 10_000, capMs: 10_000 },
    sync: async () => {
      calls++;
      throw new Error('x');
    },
  });
  q.add('k');
  await waitFor('the first try', () => calls === 1);
  await q.stop();
  q.add('k');
  assert.equal(calls, 1);
});
