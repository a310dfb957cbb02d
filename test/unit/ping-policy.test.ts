// grpc-go's server ping enforcement, step by step on a fake clock.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PingPolicy } from '../../pkg/grpc/ping-policy.js';

function policy(): { p: PingPolicy; advance: (ms: number) => void } {
  let now = 1_000_000;
  const p = new PingPolicy({ minTimeMs: 30_000, now: () => now });
  return { p, advance: (ms) => (now += ms) };
}

test('early pings with nothing written: two strikes allowed, the third trips once, later pings are ignored', () => {
  const { p, advance } = policy();
  assert.equal(p.onPing(), 'ok', 'the first ping has nothing to be early after');
  advance(10);
  assert.equal(p.onPing(), 'strike');
  advance(10);
  assert.equal(p.onPing(), 'strike');
  advance(10);
  assert.equal(p.onPing(), 'too_many_pings');
  for (let i = 0; i < 9; i++) assert.equal(p.onPing(), 'ok');
});

test('a write completed since the last ping forgives the ping and resets the strikes', () => {
  const { p, advance } = policy();
  p.onPing();
  advance(10);
  assert.equal(p.onPing(), 'strike');
  advance(10);
  assert.equal(p.onPing(), 'strike');
  p.writeQueued();
  p.writeDone();
  advance(10);
  assert.equal(p.onPing(), 'ok');
  assert.equal(p.strikeCount, 0);
  advance(10);
  assert.equal(p.onPing(), 'strike', 'forgiveness lasts for one ping');
});

test('pings while one large write is still going out are all forgiven (grpc-go BDP pings)', () => {
  const { p, advance } = policy();
  p.writeQueued();
  for (let i = 0; i < 50; i++) {
    advance(1);
    assert.equal(p.onPing(), 'ok');
  }
  p.writeDone();
  advance(1);
  assert.equal(p.onPing(), 'ok', 'it finished after the last ping');
  advance(1);
  assert.equal(p.onPing(), 'strike', 'traffic stopped: early pings count again');
});

test('response headers count as written; pings at MinTime or slower are never strikes', () => {
  const { p, advance } = policy();
  p.onPing();
  p.headersSent();
  advance(1);
  assert.equal(p.onPing(), 'ok');
  for (let i = 0; i < 10; i++) {
    advance(30_000);
    assert.equal(p.onPing(), 'ok');
  }
});
