// Noticing a silent link (pkg/mux/liveness.ts): a ping only after a quiet
// spell, death only when nothing at all came back after it; traffic keeps a
// link alive whatever its pings do.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { LivenessWatch } from '../../pkg/mux/liveness.js';

const LIMIT = { timeout: 20_000 };

/** The watch's timer is unref'd; the test holds the loop open meanwhile. */
function keepAlive(t: { after(fn: () => void): void }): void {
  const timer = setInterval(() => {}, 1000);
  t.after(() => clearInterval(timer));
}

async function waitUntil(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(2);
  }
}

test('a quiet link is pinged after idleMs; answered, it lives and is pinged again after another quiet spell', LIMIT, async (t) => {
  keepAlive(t);
  const pings: number[] = [];
  let dead = 0;
  const started = performance.now();
  const w = new LivenessWatch({
    idleMs: 60,
    timeoutMs: 60,
    ping: () => {
      pings.push(performance.now() - started);
      setTimeout(() => w.received(), 5); // the answer
      return true;
    },
    onDead: () => dead++,
  });
  t.after(() => w.stop());
  w.start();
  await waitUntil(() => pings.length >= 3);
  w.stop();
  assert.equal(dead, 0);
  assert.ok(pings[0]! >= 55, `first ping after the quiet spell (${pings[0]} ms)`);
  assert.ok(pings[1]! - pings[0]! >= 55, 'the next one after another');
});

test('a ping with nothing back within timeoutMs: dead, once, with how long the link was silent', LIMIT, async (t) => {
  keepAlive(t);
  let pings = 0;
  const deaths: number[] = [];
  const w = new LivenessWatch({ idleMs: 40, timeoutMs: 80, ping: () => (pings++, true), onDead: (ms) => deaths.push(ms) });
  t.after(() => w.stop());
  const started = performance.now();
  w.start();
  await waitUntil(() => deaths.length > 0);
  const took = performance.now() - started;
  assert.equal(pings, 1);
  assert.ok(took >= 115, `not before idle + timeout (${took} ms)`);
  assert.ok(deaths[0]! >= 115);
  // A witness watch started now with the same timings: once it is dead, the first would have had time to report twice.
  let witnessDead = false;
  const witness = new LivenessWatch({ idleMs: 40, timeoutMs: 80, ping: () => true, onDead: () => (witnessDead = true) });
  t.after(() => witness.stop());
  witness.start();
  await waitUntil(() => witnessDead);
  assert.equal(deaths.length, 1, 'reported once');
});

test('traffic keeps a link alive: no ping while packets arrive, and a late ping answer does not matter while data flows', LIMIT, async (t) => {
  keepAlive(t);
  // The watch reads this clock; its timer still runs on real time, so a loaded machine changes nothing here.
  let clock = 0;
  let pings = 0;
  let dead = 0;
  const w = new LivenessWatch({ idleMs: 20, timeoutMs: 20, now: () => clock, ping: () => (pings++, true), onDead: () => dead++ });
  t.after(() => w.stop());
  w.start();
  // Packets keep arriving, 5 ms apart on the watch's clock, while its timer fires many times.
  for (let i = 0; i < 40; i++) {
    clock += 5;
    w.received();
    await sleep(2);
  }
  assert.equal(pings, 0, 'no ping on a busy link');
  // Quiet: a ping goes out.
  clock += 25;
  await waitUntil(() => pings === 1);
  // Its answer waits behind data, but data arrives within the timeout, and then the link goes quiet again.
  clock += 10;
  w.received();
  clock += 100;
  // The next event is another ping, not a death: the data proved the link alive.
  await waitUntil(() => pings === 2 || dead > 0);
  assert.deepEqual([pings, dead], [2, 0]);
});

test('a ping that cannot be sent is tried again; stop ends everything', LIMIT, async (t) => {
  keepAlive(t);
  let tries = 0;
  let dead = 0;
  const w = new LivenessWatch({ idleMs: 20, timeoutMs: 20, ping: () => (++tries, false), onDead: () => dead++ });
  t.after(() => w.stop());
  w.start();
  await waitUntil(() => tries >= 3);
  assert.equal(dead, 0, 'an unsent ping is not an unanswered one');
  w.stop();
  const at = tries;
  // A witness with the same timing: after its second ping, the stopped watch would have tried again.
  let witnessTries = 0;
  const witness = new LivenessWatch({ idleMs: 20, timeoutMs: 20, ping: () => (++witnessTries, false), onDead: () => {} });
  t.after(() => witness.stop());
  witness.start();
  await waitUntil(() => witnessTries >= 2);
  assert.equal(tries, at, 'stopped: no more pings');
  assert.throws(() => new LivenessWatch({ idleMs: 0, timeoutMs: 1, ping: () => true, onDead: () => {} }), TypeError);
});

test('a nudge after nudgeMs of quiet, again every nudgeMs while it lasts, counted from the last packet; never a verdict', LIMIT, async (t) => {
  keepAlive(t);
  const nudges: number[] = [];
  let deaths = 0;
  const w = new LivenessWatch({
    idleMs: 10_000,
    timeoutMs: 10_000,
    ping: () => true,
    onDead: () => deaths++,
    nudge: () => nudges.push(performance.now()),
    nudgeMs: 30,
  });
  t.after(() => w.stop());
  const startedAt = performance.now();
  w.start();
  await waitUntil(() => nudges.length >= 1);
  assert.ok(nudges[0]! - startedAt >= 29, `the first nudge came ${Math.round(nudges[0]! - startedAt)} ms into the quiet`);
  // A packet starts the quiet again.
  const packetAt = performance.now();
  w.received();
  const seen = nudges.length;
  await waitUntil(() => nudges.length >= seen + 3);
  assert.ok(nudges[seen]! - packetAt >= 29, `the nudge after a packet came ${Math.round(nudges[seen]! - packetAt)} ms after it`);
  for (let i = seen + 1; i < seen + 3; i++) assert.ok(nudges[i]! - nudges[i - 1]! >= 29, 'one per nudgeMs');
  assert.equal(deaths, 0, 'a nudge is not a verdict');
});
