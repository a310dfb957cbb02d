// Keepalive pings of links that started together must not stay in step, and
// must never come sooner than the interval (a peer's ping policy counts on it).

import assert from 'node:assert/strict';
import type { Http2Session } from 'node:http2';
import { test } from 'node:test';
import { KEEPALIVE_JITTER, Keepalive, keepaliveDelay } from '../../pkg/grpc/keepalive.js';

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
    const k = new Keepalive(session, { intervalMs: () => 1_000, timeoutMs: 5_000, onTimeout: () => assert.fail('no timeout expected') });
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
