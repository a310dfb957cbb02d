// The agent's reconnect backoff: ×factor per failure up to a cap, each delay
// stretched by up to `jitter` of itself, back to the start after reset().

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Backoff, type BackoffOptions } from '../../pkg/timers/backoff.js';

const LIMIT = { timeout: 10_000 };

/** The agent's defaults: --sync-interval 1s, ×1.5, --sync-interval-cap 10s. */
const AGENT: BackoffOptions = { initialMs: 1000, factor: 1.5, jitter: 0.1, capMs: 10_000 };

const UNJITTERED = [1000, 1500, 2250, 3375, 5062.5, 7593.75, 10_000, 10_000, 10_000];

function delays(b: Backoff, n: number): number[] {
  return Array.from({ length: n }, () => b.next());
}

test('without jitter the delays grow ×1.5 from 1000 and stay at the 10000 cap', LIMIT, () => {
  assert.deepEqual(delays(new Backoff({ ...AGENT, random: () => 0 }), UNJITTERED.length), UNJITTERED);
  assert.deepEqual(delays(new Backoff({ ...AGENT, jitter: 0 }), UNJITTERED.length), UNJITTERED);
});

test('jitter stretches each delay by less than `jitter` of itself, never shrinks it', LIMIT, () => {
  const high = delays(new Backoff({ ...AGENT, random: () => 0.999 }), UNJITTERED.length);
  high.forEach((d, i) => {
    const base = UNJITTERED[i]!;
    assert.ok(d >= base && d < base * 1.1, `delay ${i}: ${d} not in [${base}, ${base * 1.1})`);
    assert.equal(d, base * (1 + 0.1 * 0.999));
  });
  // The cap bounds the base, and jitter is applied on top of it.
  assert.ok(high.at(-1)! < 11_000);
});

test('jitter is drawn afresh for every delay', LIMIT, () => {
  const draws = [0, 0.5, 0.999];
  let i = 0;
  const b = new Backoff({ ...AGENT, random: () => draws[i++ % draws.length]! });
  assert.deepEqual(delays(b, 3), [1000, 1500 * 1.05, 2250 * (1 + 0.1 * 0.999)]);
});

test('reset() starts the sequence again from the initial delay', LIMIT, () => {
  const b = new Backoff({ ...AGENT, random: () => 0 });
  delays(b, 8);
  b.reset();
  assert.deepEqual(delays(b, 3), [1000, 1500, 2250]);
  b.reset();
  b.reset();
  assert.equal(b.next(), 1000);
});

test('an initial delay equal to the cap gives a constant delay', LIMIT, () => {
  assert.deepEqual(delays(new Backoff({ initialMs: 500, factor: 2, jitter: 0, capMs: 500 }), 3), [500, 500, 500]);
  assert.deepEqual(delays(new Backoff({ initialMs: 500, factor: 1, jitter: 0, capMs: 5000 }), 3), [500, 500, 500]);
});

test('invalid options throw a TypeError showing them', LIMIT, () => {
  assert.throws(() => new Backoff({ initialMs: 0, factor: 1.5, jitter: 0.1, capMs: 10_000 }), {
    name: 'TypeError',
    message: 'invalid backoff {"initialMs":0,"factor":1.5,"jitter":0.1,"capMs":10000}',
  });
  const bad: Array<Partial<BackoffOptions>> = [{ initialMs: -1 }, { factor: 0.5 }, { factor: 0 }, { capMs: 999 }, { jitter: -0.1 }];
  for (const change of bad) {
    const opts = { ...AGENT, ...change };
    assert.throws(() => new Backoff(opts), { name: 'TypeError', message: `invalid backoff ${JSON.stringify(opts)}` }, JSON.stringify(change));
  }
});

test('NaN options are invalid too (they would make every delay NaN, i.e. a redial loop)', LIMIT, () => {
  for (const key of ['initialMs', 'factor', 'jitter', 'capMs'] as const) {
    const opts = { ...AGENT, [key]: Number.NaN };
    assert.throws(() => new Backoff(opts), TypeError, `${key}: NaN was accepted`);
  }
});

test('full jitter draws each delay from (0, current], growing the ceiling as usual', () => {
  const draws = [0, 0.5, 0.999, 0.25];
  let i = 0;
  const b = new Backoff({ initialMs: 1000, factor: 2, jitter: 0.1, fullJitter: true, capMs: 4000, random: () => draws[i++ % draws.length]! });
  assert.equal(b.next(), 10, 'never below 10 ms');
  assert.equal(b.next(), 1000);
  assert.ok(Math.abs(b.next() - 3996) < 1e-6);
  assert.equal(b.next(), 1000, 'capped ceiling 4000 × 0.25');
});
