// One full garbage collection when a flood of connections has ended, never
// in a steady state; and the collection itself through the inspector.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { collectGarbage, GarbageAfterFlood } from '../../pkg/meta/garbage-after-flood.js';
import { MemoryLogger } from '../support/memory-logger.js';

const LIMIT = { timeout: 30_000 };

/** A GarbageAfterFlood reading `counts` one per check, with a collection that only counts. */
function follow(counts: number[], drop = 1000): { run(): Promise<number> } {
  let i = 0;
  const g = new GarbageAfterFlood({
    openConnections: () => counts[Math.min(i++, counts.length - 1)]!,
    drop,
    collect: async () => {},
    logger: new MemoryLogger(),
  });
  return {
    async run() {
      for (let k = 0; k < counts.length; k++) await g.check();
      return g.collections;
    },
  };
}

test('a flood that ended (6,500 open connections, then none) gets exactly one collection', LIMIT, async () => {
  assert.equal(await follow([20, 3000, 6500, 6500, 0, 0, 0]).run(), 1);
});

test('a steady load, however busy, and a fall smaller than the threshold get none', LIMIT, async () => {
  assert.equal(await follow([200, 210, 190, 205, 200, 195, 200]).run(), 0);
  assert.equal(await follow([0, 900, 0, 900, 0]).run(), 0);
});

test('a slow fall collects once the connections closed since the peak reach the threshold', LIMIT, async () => {
  assert.equal(await follow([1500, 1200, 900, 499, 300, 100]).run(), 1);
  assert.equal(await follow([2500, 1400, 300]).run(), 2, 'each threshold crossed since the last collection counts anew');
});

test('a collection that fails is logged, and the server goes on', LIMIT, async () => {
  const log = new MemoryLogger();
  const counts = [2000, 0];
  const g = new GarbageAfterFlood({ openConnections: () => counts.shift() ?? 0, collect: () => Promise.reject(new Error('no inspector')), logger: log });
  await g.check();
  await g.check();
  assert.equal(g.collections, 0);
  assert.equal(log.find('could not run a garbage collection')[0]?.fields.error, 'no inspector');
});

test('collectGarbage runs a full collection: garbage that survived into the old generation is gone', LIMIT, async () => {
  let keep: Array<{ n: number; s: string }> | undefined = [];
  for (let i = 0; i < 500_000; i++) keep.push({ n: i, s: `item ${i}` });
  keep = undefined;
  const before = process.memoryUsage().heapUsed;
  await collectGarbage();
  const after = process.memoryUsage().heapUsed;
  assert.ok(before - after > 20 * 1024 * 1024, `heapUsed ${before} -> ${after}`);
});
