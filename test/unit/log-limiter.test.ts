// Repeated warnings of one kind are kept to a few per interval, and one
// summary line says how many were left out.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogLimiter } from '../../pkg/log/log-limiter.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 10_000 };

test('2,000 warnings of one kind: the first few are written, then one summary with the count left out', LIMIT, async (t) => {
  const h = harness(t);
  const log = new MemoryLogger(0);
  const limiter = new LogLimiter(log, { burst: 5, intervalMs: 200 });
  h.defer(() => limiter.flush());
  for (let i = 0; i < 2000; i++) limiter.warn('caller refused', { n: i });
  assert.equal(log.records.length, 5);
  assert.deepEqual(
    log.records.map((r) => r.fields.n),
    [0, 1, 2, 3, 4],
  );
  await waitFor('the summary line', () => log.records.length === 6);
  const summary = log.records[5]!;
  assert.equal(summary.level, 'warn');
  assert.match(summary.message, /^caller refused \(1995 more like this in 0\.2 s not logged\)$/);
  assert.equal(summary.fields.leftOut, 1995);
  assert.equal(summary.fields.n, 1999, 'the summary keeps the fields of the last line left out');
  // The next interval writes again.
  limiter.warn('caller refused', { n: 2000 });
  assert.equal(log.records.length, 7);
});

test('kinds are limited apart, and a kind with nothing left out writes no summary', LIMIT, async (t) => {
  const h = harness(t);
  const log = new MemoryLogger(0);
  const limiter = new LogLimiter(log, { burst: 2, intervalMs: 60_000 });
  h.defer(() => limiter.flush());
  for (let i = 0; i < 10; i++) limiter.warn('a');
  limiter.warn('b');
  assert.deepEqual(
    log.records.map((r) => r.message),
    ['a', 'a', 'b'],
  );
  limiter.flush();
  assert.deepEqual(
    log.records.map((r) => r.message),
    ['a', 'a', 'b', 'a (8 more like this in 60 s not logged)'],
  );
});

test('verbose lines below the verbosity are neither written nor counted', LIMIT, () => {
  const log = new MemoryLogger(1);
  const limiter = new LogLimiter(log, { burst: 1 });
  for (let i = 0; i < 5; i++) limiter.verbose(2, 'packet for an unknown connection');
  limiter.flush();
  assert.equal(log.records.length, 0);
  for (let i = 0; i < 5; i++) limiter.verbose(1, 'shown');
  limiter.flush();
  assert.deepEqual(
    log.records.map((r) => `${r.level} ${r.message}`),
    ['info shown', 'info shown (4 more like this in 10 s not logged)'],
  );
});
