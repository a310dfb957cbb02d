// Keepalive pings of links that started together must not stay in step, and
// must never come sooner than the interval (a peer's ping policy counts on it).
// As grpc-go's, they go only to a peer that has been silent for an interval: a
// link the peer talks on (an agent pinging for its own liveness check) costs no
// ping of ours.

import assert from 'node:assert/strict';
import type { Http2Session } from 'node:http2';
import { test, type TestContext } from 'node:test';
import http2 from 'node:http2';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { KEEPALIVE_JITTER, Keepalive, keepaliveDelay, transportBytesRead } from '../../pkg/grpc/keepalive.js';

test('the wait is the interval plus at most a tenth of it, never less', () => {
  assert.equal(keepaliveDelay(10_000, 0), 10_000);
  assert.equal(keepaliveDelay(10_000, 0.5), 10_500);
  assert.ok(keepaliveDelay(10_000, 0.999999) < 10_000 * (1 + KEEPALIVE_JITTER));
  assert.ok(keepaliveDelay(10_000, 0.999999) >= 10_999);
});

test('keepalives started together ping at different times, each after at least the interval', (t) => {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  const randoms = [0, 0.5, 0.9];
  t.mock.method(Math, 'random', () => randoms.shift() ?? 0);
  const pings: Array<{ link: number; at: number }> = [];
  let now = 0;
  const links = [0, 1, 2].map((link) => {
    const session = {
      destroyed: false,
      ping: (cb: (err: Error | null, ms: number) => void) => {
        pings.push({ link, at: now });
        cb(null, 1);
        return true;
      },
    } as unknown as Http2Session;
    const k = new Keepalive(session, {
      intervalMs: () => 1_000,
      timeoutMs: 5_000,
      received: () => 0,
      now: () => now,
      onTimeout: () => assert.fail('no timeout expected'),
    });
    k.start();
    return k;
  });
  while (now < 1_100) {
    now += 1;
    t.mock.timers.tick(1);
  }
  for (const k of links) k.stop();
  assert.deepEqual(
    pings.map((p) => [p.link, p.at]),
    [
      [0, 1_000],
      [1, 1_050],
      [2, 1_090],
    ],
  );
});

/**
 * A Keepalive on a stand-in session, on mocked timers and clock: `run(until, talkEveryMs)` advances time
 * millisecond by millisecond, the peer sending frames every `talkEveryMs` (0: silent).
 */
function simulated(
  t: TestContext,
  opts: {
    answers: boolean;
    sends?: boolean;
    timeoutMs?: number;
    measureEveryMs?: number;
    measureAtStart?: boolean;
    /** Round trips the answers report, in turn (default 2 ms each). */
    roundTrips?: number[];
  },
): {
  keepalive: Keepalive;
  pings: number[];
  /** What each onTimeout was told: how long nothing was heard. */
  silences: number[];
  timeouts: () => number;
  hear: (bytes: number) => void;
  run: (until: number, talkEveryMs?: number) => void;
} {
  t.mock.timers.enable({ apis: ['setTimeout'] });
  t.mock.method(Math, 'random', () => 0);
  let now = 0;
  let received = 0;
  const pings: number[] = [];
  const silences: number[] = [];
  const session = {
    destroyed: false,
    ping: (cb: (err: Error | null, ms: number) => void) => {
      pings.push(now);
      if (opts.sends === false) return false; // too many in flight: not sent, no callback
      if (opts.answers) {
        received += 17; // the ACK is read too
        cb(null, opts.roundTrips?.shift() ?? 2);
      }
      return true;
    },
  } as unknown as Http2Session;
  const keepalive = new Keepalive(session, {
    intervalMs: () => 1_000,
    received: () => received,
    now: () => now,
    timeoutMs: opts.timeoutMs ?? 5_000,
    ...(opts.measureEveryMs !== undefined ? { measureEveryMs: opts.measureEveryMs } : {}),
    ...(opts.measureAtStart !== undefined ? { measureAtStart: opts.measureAtStart } : {}),
    onTimeout: (silentMs) => silences.push(silentMs),
  });
  keepalive.start();
  t.after(() => keepalive.stop());
  return {
    keepalive,
    pings,
    silences,
    timeouts: () => silences.length,
    hear: (bytes) => (received += bytes),
    run: (until, talkEveryMs = 0) => {
      while (now < until) {
        now += 1;
        if (talkEveryMs > 0 && now % talkEveryMs === 0) received += 9;
        t.mock.timers.tick(1);
      }
    },
  };
}

test('a peer heard within the interval is not pinged; a silent one is, at most half an interval late', (t) => {
  const { pings, run } = simulated(t, { answers: true });
  run(5_000, 300);
  assert.deepEqual(pings, [], 'a talking peer needs no ping');
  run(8_500);
  // Looks every 500 ms; the peer was last heard at 4,800, which the look at 5,000 saw: the ping is due at 6,000
  // (grpc-go: 5,800); then one interval after each answer.
  assert.deepEqual(pings, [6_000, 7_000, 8_000]);
});

test('a peer heard all the time is still pinged every measureEveryMs, for a fresh round trip', (t) => {
  const { keepalive, pings, run } = simulated(t, { answers: true, measureEveryMs: 3_000 });
  run(7_000, 300);
  // The first look that hears the peer measures at once; then every 3,000 ms, at the first look after.
  assert.deepEqual(pings, [500, 3_500, 6_500]);
  assert.equal(keepalive.lastRoundTripMs, 2);
});

test('measureAtStart pings as the watch starts; minRoundTripMs keeps the smallest round trip, lastRoundTripMs the latest', (t) => {
  const { keepalive, pings, run } = simulated(t, { answers: true, measureAtStart: true, measureEveryMs: 3_000, roundTrips: [9, 4, 30] });
  assert.deepEqual(pings, [0], 'measured before the link carries anything');
  assert.equal(keepalive.minRoundTripMs, 9);
  run(7_000, 300);
  assert.deepEqual(pings, [0, 3_000, 6_000]);
  assert.equal(keepalive.minRoundTripMs, 4);
  assert.equal(keepalive.lastRoundTripMs, 30);
});

test('without measureAtStart no round trip is known before the first ping', (t) => {
  const { keepalive, pings } = simulated(t, { answers: true });
  assert.deepEqual(pings, []);
  assert.equal(keepalive.minRoundTripMs, undefined);
});

test('a ping whose answer is late counts the peer alive while anything else arrives; silence ends it', (t) => {
  const { pings, timeouts, hear, run } = simulated(t, { answers: false, timeoutMs: 500 });
  run(1_000);
  assert.deepEqual(pings, [1_000]);
  hear(16_384); // DATA the answer is queued behind
  run(1_500);
  assert.equal(timeouts(), 0, 'heard while the ping was out: alive');
  run(2_500);
  assert.deepEqual(pings, [1_000, 2_500], 'silent for an interval again: pinged again');
  run(3_000);
  assert.equal(timeouts(), 1, 'nothing at all arrived: the link is dead');
});

test('a silent peer: one ping, then one timeout, told how long nothing was heard; nothing after it', (t) => {
  const { pings, silences, run } = simulated(t, { answers: false, timeoutMs: 800 });
  run(1_000, 100);
  // Last heard by the look at 1,000 (the peer talked every 100 ms until then); due one interval after.
  run(10_000);
  assert.deepEqual(pings, [2_000]);
  assert.deepEqual(silences, [1_800], 'silent from the look that last heard it to the deadline of the ping');
});

test('a ping that cannot be sent (too many in flight) is tried again one interval later, and is no timeout', (t) => {
  const { pings, timeouts, run } = simulated(t, { answers: false, sends: false, timeoutMs: 300 });
  run(3_500);
  assert.deepEqual(pings, [1_000, 2_000, 3_000]);
  assert.equal(timeouts(), 0);
});

test('a timeout must be positive', () => {
  const session = { destroyed: false, ping: () => true } as unknown as Http2Session;
  assert.throws(() => new Keepalive(session, { intervalMs: () => 1_000, timeoutMs: 0, received: () => 0, onTimeout: () => {} }), TypeError);
});

test('over a real HTTP/2 connection: the server does not ping a client that pings it, and pings it once it stops', async (t) => {
  const server = http2.createServer();
  const sessions: http2.ServerHttp2Session[] = [];
  server.on('session', (s) => sessions.push(s));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  t.after(() => {
    client.destroy();
    for (const s of sessions) s.destroy();
    server.close();
  });
  await once(client, 'connect');
  while (sessions.length === 0) await sleep(5);
  const session = sessions[0]!;
  let pings = 0;
  client.on('ping', () => pings++);
  const pingsSeen = (): number => pings;
  const k = new Keepalive(session, {
    // Well above the client's pace, so that a stall of this loaded test process is not taken for silence.
    intervalMs: () => 400,
    received: transportBytesRead(session),
    timeoutMs: 5_000,
    onTimeout: () => assert.fail('answered'),
  });
  t.after(() => k.stop());
  k.start();
  for (let i = 0; i < 30; i++) {
    await new Promise<void>((resolve, reject) => client.ping((err) => (err ? reject(err) : resolve())));
    await sleep(40);
  }
  assert.equal(pingsSeen(), 0, 'the client was heard every 40 ms: no ping');
  const quietSince = performance.now();
  // The client sees the ping before the server reads its answer: wait for both.
  const answered = (): boolean => k.lastRoundTripMs !== undefined;
  while ((pingsSeen() === 0 || !answered()) && performance.now() - quietSince < 5_000) await sleep(10);
  assert.ok(pingsSeen() >= 1, 'pinged once the client went quiet');
  assert.ok(answered(), 'and the answer was read');
});
