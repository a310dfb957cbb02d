// IdMap (pkg/mux/id-map.ts): the same answers as a Map under random
// additions and deletions (keys that share slots, runs that wrap around the
// end, growing and shrinking), any 64-bit key, and the reason it exists: a
// table that lives long while its entries come and go leaves nothing in the
// old generation, where a Map leaves its replaced hash tables.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { IdMap } from '../../pkg/mux/id-map.js';
import { assertTableStaysPut } from '../support/old-generation.js';
import { distUrl as url } from '../support/v8-natives.js';

const LIMIT = { timeout: 30_000 };

/** A small deterministic generator (xorshift32), so a failure replays. */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

function assertSame(ids: IdMap<number>, oracle: Map<bigint, number>, step: string): void {
  assert.equal(ids.size, oracle.size, step);
  const sortedKeys = (keys: bigint[]): bigint[] => keys.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  assert.deepEqual(sortedKeys(ids.keyList()), sortedKeys([...oracle.keys()]), step);
  assert.deepEqual(
    ids.values().sort((a, b) => a - b),
    [...oracle.values()].sort((a, b) => a - b),
    step,
  );
}

test('IdMap answers as a Map does through 20,000 random sets, gets and deletes, growing to hundreds and back to none', LIMIT, () => {
  for (const [seed, keySpace] of [
    [1, 64],
    [7, 1000],
    [99, 5],
  ] as const) {
    const next = random(seed);
    const ids = new IdMap<number>();
    const oracle = new Map<bigint, number>();
    for (let step = 0; step < 20_000; step++) {
      // Mostly adds in the first half, mostly deletes in the second: the table grows and shrinks.
      const addBias = step < 10_000 ? 0.6 : 0.3;
      const key = BigInt(Math.floor(next() * keySpace));
      const r = next();
      if (r < addBias) {
        ids.set(key, step);
        oracle.set(key, step);
      } else if (r < 0.9) {
        assert.equal(ids.delete(key), oracle.delete(key), `delete ${key} at ${step}`);
      }
      assert.equal(ids.get(key), oracle.get(key), `get ${key} at ${step}`);
      assert.equal(ids.has(key), oracle.has(key), `has ${key} at ${step}`);
      if (step % 500 === 0) assertSame(ids, oracle, `seed ${seed}, step ${step}`);
    }
    for (const key of [...oracle.keys()]) {
      assert.ok(ids.delete(key));
      oracle.delete(key);
    }
    assertSame(ids, oracle, `seed ${seed}, emptied`);
    assert.equal(ids.delete(0n), false);
  }
});

test('IdMap takes any 64-bit key, negative and above 2^53 included, and tells apart keys that differ only in high bits', LIMIT, () => {
  const ids = new IdMap<string>();
  const keys = [0n, 1n, -1n, 2n ** 32n, 2n ** 32n + 1n, 2n ** 53n + 1n, 2n ** 63n - 1n, -(2n ** 63n), 2n ** 64n - 1n, 5n << 40n, 6n << 40n];
  for (const k of keys) ids.set(k, String(k));
  assert.equal(ids.size, keys.length);
  for (const k of keys) assert.equal(ids.get(k), String(k));
  ids.set(5n << 40n, 'again');
  assert.equal(ids.size, keys.length, 'a set of a key that is there replaces its value');
  assert.equal(ids.get(5n << 40n), 'again');
  assert.equal(ids.get(7n << 40n), undefined);
});

test('IdMap: values() and keyList() are copies, so a caller may delete while it goes through them; clear() empties', LIMIT, () => {
  const ids = new IdMap<number>();
  for (let i = 0; i < 100; i++) ids.set(BigInt(i), i);
  let seen = 0;
  for (const v of ids.values()) {
    assert.ok(ids.delete(BigInt(v)));
    seen++;
  }
  assert.equal(seen, 100);
  assert.equal(ids.size, 0);
  for (let i = 0; i < 10; i++) ids.set(BigInt(i), i);
  ids.clear();
  assert.equal(ids.size, 0);
  assert.equal(ids.get(3n), undefined);
  ids.set(3n, 3);
  assert.equal(ids.get(3n), 3);
});

test('a long-lived IdMap whose entries come and go leaves nothing in the old generation; a Map leaves its replaced tables', LIMIT, () => {
  assertTableStaysPut(
    `const { IdMap } = await import(${url('dist/pkg/mux/id-map.js')});
    // Tables that live as a link does: a few entries stay, one comes and goes per connection.
    function perEntry(table) {
      let id = 1n;
      for (let i = 0; i < 3; i++) table.set(id++, {});
      return oldBytesPerSync(() => {
        const key = id++;
        table.set(key, { key });
        table.get(key);
        table.delete(key);
      });
    }
    const control = perEntry(new Map());
    const ours = perEntry(new IdMap());
    console.log(JSON.stringify({ ours, control }));`,
    { ours: 'IdMap', control: 'Map', item: 'entry' },
  );
});
