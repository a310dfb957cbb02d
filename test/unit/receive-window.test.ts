import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  ASSUMED_RTT_MS,
  MAX_AUTO_WINDOW,
  MIN_AUTO_WINDOW,
  NARROW_TO_MS,
  ReceiveWindow,
  readMarkFor,
  WIDEN_BELOW_MS,
} from '../../pkg/protocol/receive-window.js';

const KiB = 1024;
const MiB = 1024 * KiB;

/** A ReceiveWindow on a clock the test sets: each grant says when it happens. */
class TestWindow {
  private clock = 0;
  private readonly w: ReceiveWindow;
  constructor(announced: number, roundTripMs?: () => number | undefined) {
    this.w = new ReceiveWindow(announced, roundTripMs, () => this.clock);
  }
  get size(): number {
    return this.w.size;
  }
  grant(taken: number, keepsUp: boolean, now: number): number {
    this.clock = now;
    return this.w.grant(taken, keepsUp);
  }
  exceeded(received: number): boolean {
    return this.w.exceeded(received);
  }
}

/** A link that measured a 1 ms round trip (a LAN, or a slow edge link close by). */
const SHORT = (): number => 1;

/** A reader taking `rate` bytes per ms, granted back as the window asks; returns the window after `ms`. */
function run(w: TestWindow, rate: number, ms: number, keepsUp = true, start = { taken: 0, now: 0 }): { taken: number; now: number; granted: number } {
  let { taken, now } = start;
  let granted = 0;
  for (let t = 0; t < ms; t++) {
    now += 1;
    taken += rate;
    granted += w.grant(taken, keepsUp, now);
  }
  return { taken, now, granted };
}

test('grants go back in batches of a quarter window, as much as was taken', () => {
  const w = new TestWindow(MiB);
  assert.equal(w.grant(256 * KiB - 1, false, 10), 0, 'under a quarter: nothing yet');
  // 256 KiB in 150 ms drains the window in 600 ms: between widening and narrowing, it stays.
  assert.equal(w.grant(256 * KiB, false, 150), 256 * KiB);
  assert.equal(w.size, MiB);
  assert.equal(w.grant(300 * KiB, false, 200), 0);
  assert.equal(w.grant(512 * KiB, false, 300), 256 * KiB);
  assert.equal(w.size, MiB);
});

test('a fast reader that keeps up widens the window to MAX_AUTO_WINDOW; the peer is allowed exactly what was granted', () => {
  const w = new TestWindow(MiB);
  // 100 MiB/s: a 1 MiB window drains in 10 ms.
  const { taken, granted } = run(w, 100 * KiB, 200);
  assert.equal(w.size, MAX_AUTO_WINDOW);
  assert.ok(granted > taken - MiB, 'widened: more granted than taken');
  assert.ok(taken + MAX_AUTO_WINDOW >= MiB + granted, 'never past MAX_AUTO_WINDOW in flight');
  assert.equal(w.exceeded(MiB + granted), false);
  assert.equal(w.exceeded(MiB + granted + 1), true);
});

test('a fast reader that does not keep up (its buffer is not empty) is not widened', () => {
  const w = new TestWindow(MiB);
  run(w, 100 * KiB, 200, false);
  assert.equal(w.size, MiB);
});

test('over a slow link the window narrows to about NARROW_TO_MS of data, never below MIN_AUTO_WINDOW, and widens again when the path is fast', () => {
  const w = new TestWindow(MiB, SHORT);
  // 2 Mbit/s: 250 bytes per ms; a 1 MiB window takes 4 s to drain.
  const slow = run(w, 250, 3000);
  assert.equal(w.size, MIN_AUTO_WINDOW, 'a quarter second at 2 Mbit/s (62.5 KB) is below the floor');
  // 20 Mbit/s, 2,500 bytes per ms: a widened 4 MiB window (1.7 s to drain) narrows to a quarter second of it, and stays.
  const w2 = new TestWindow(4 * MiB, SHORT);
  run(w2, 2500, 6000);
  assert.ok(Math.abs(w2.size - 2500 * NARROW_TO_MS) <= 2500, `narrowed to ${w2.size}`);
  // The path gets fast (the link was the slow part): the window widens back.
  run(w, 100 * KiB, 300, true, slow);
  assert.equal(w.size, MAX_AUTO_WINDOW);
});

test('narrowing takes nothing back: grants pause until the peer allowance fits the smaller window', () => {
  const w = new TestWindow(MiB, SHORT);
  // 256 KiB taken in 2 s: drain 8 s, narrowed to 250 ms of 128 KiB/s = 32 KiB -> the 64 KiB floor.
  assert.equal(w.grant(256 * KiB, true, 2000), 0, 'the peer still holds 1 MiB of allowance');
  assert.equal(w.size, MIN_AUTO_WINDOW);
  assert.equal(w.exceeded(MiB), false, 'what was granted stays granted');
  assert.equal(w.exceeded(MiB + 1), true);
  // Once taken + window passes what was allowed, grants resume, a quarter of the new window at a time.
  assert.equal(w.grant(MiB - MIN_AUTO_WINDOW + 16 * KiB - 1, true, 2100), 0);
  assert.ok(w.grant(MiB, true, 2200) >= MIN_AUTO_WINDOW / 4);
});

test('a window announced below MIN_AUTO_WINDOW never narrows below itself; one announced above MAX_AUTO_WINDOW never widens', () => {
  const small = new TestWindow(16 * KiB);
  run(small, 1, 20_000);
  assert.equal(small.size, 16 * KiB);
  const big = new TestWindow(8 * MiB);
  run(big, 1000 * KiB, 100);
  assert.equal(big.size, 8 * MiB);
});

test('a window that drains in exactly WIDEN_BELOW_MS still widens', () => {
  const w = new TestWindow(MiB, SHORT);
  assert.equal(w.grant(256 * KiB, true, WIDEN_BELOW_MS / 4), 256 * KiB + MiB);
  assert.equal(w.size, 2 * MiB);
});

test('over a long path the thresholds follow the round trip: a window-bound flow widens, a narrowed one keeps a round trip in flight', () => {
  // 600 ms (a satellite link), 100 Mbit/s: a window-bound flow moves its window once per round trip.
  const satellite = (): number => 600;
  const w = new TestWindow(256 * KiB, satellite);
  let taken = 0;
  let allowed = 256 * KiB;
  for (let now = 600; now <= 6000 && w.size < MAX_AUTO_WINDOW; now += 600) {
    taken = allowed; // everything allowed arrives and is taken within the round trip
    allowed += w.grant(taken, true, now);
  }
  assert.equal(w.size, MAX_AUTO_WINDOW, 'drains in one round trip (600 ms): under 2R, it widens');
  // The same path bound by a 2 Mbit/s link: narrowed, but to 3R of data, not to 250 ms (which would bind it to its window).
  const slow = new TestWindow(4 * MiB, satellite);
  run(slow, 250, 60_000);
  assert.ok(Math.abs(slow.size - 250 * 3 * 600) <= 250, `narrowed to ${slow.size}, 3R at 250 B/ms is ${250 * 1800}`);
});

test('before the link has measured its round trip, ASSUMED_RTT_MS stands in for it', () => {
  let rtt: number | undefined;
  const w = new TestWindow(4 * MiB, () => rtt);
  run(w, 250, 60_000);
  assert.ok(Math.abs(w.size - 250 * 3 * ASSUMED_RTT_MS) <= 250, `narrowed to ${w.size}`);
  rtt = 1;
  run(w, 250, 60_000, true, { taken: 250 * 60_000, now: 60_000 });
  assert.equal(w.size, MIN_AUTO_WINDOW, 'measured: narrowed further');
});

test('readMarkFor: below three quarters of the narrowest window the window can reach', () => {
  assert.equal(readMarkFor(128 * KiB), 48 * KiB);
  assert.equal(readMarkFor(4 * MiB), 48 * KiB);
  assert.equal(readMarkFor(16 * KiB), 12 * KiB);
  assert.equal(readMarkFor(1), 1);
});
