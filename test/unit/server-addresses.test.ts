// Which of several server addresses the agent dials next: the list parsed and
// checked naming the flag; addresses without a link first, round from a random
// start; a failed address waits out its own backoff while the others are dialled.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseServerAddresses, ServerAddresses } from '../../pkg/agent/server-addresses.js';

const LIMIT = { timeout: 10_000 };
const BACKOFF = { initialMs: 1000, factor: 2, jitter: 0, capMs: 8000 };
const NONE = new Set<string>();

test('the list is trimmed, deduplicated and each entry checked, naming the flag', LIMIT, () => {
  assert.deepEqual(parseServerAddresses(' a:1 , b:2,,a:1 ,[fd00::1]:3'), ['a:1', 'b:2', '[fd00::1]:3']);
  assert.throws(() => parseServerAddresses('a:1, b'), { name: 'TypeError', message: /^--tunnelserver-addr: "b" is not host:port/ });
  assert.throws(() => parseServerAddresses('a:0'), /--tunnelserver-addr: "a:0"/);
  assert.throws(() => parseServerAddresses(' , '), /--tunnelserver-addr names no address/);
});

test('one address is always the one dialled, at once', LIMIT, () => {
  const one = new ServerAddresses(['lb:1'], BACKOFF);
  for (let i = 0; i < 3; i++) assert.deepEqual(one.next(new Set(['lb:1']), NONE, 0), { address: 'lb:1', waitMs: 0 });
});

test('the round starts at a random address, so agents spread', LIMIT, () => {
  const list = ['a:1', 'b:1', 'c:1'];
  const firsts = [0, 0.4, 0.8].map((r) => new ServerAddresses(list, BACKOFF, () => r).next(NONE, NONE, 0).address);
  assert.deepEqual(firsts, ['a:1', 'b:1', 'c:1']);
  const s = new ServerAddresses(list, BACKOFF, () => 0.5);
  assert.deepEqual(
    [0, 1, 2, 3].map(() => s.next(NONE, NONE, 0).address),
    ['b:1', 'c:1', 'a:1', 'b:1'],
  );
});

test('addresses holding no link come first, an awaited session before them', LIMIT, () => {
  const s = new ServerAddresses(['a:1', 'b:1', 'c:1'], BACKOFF, () => 0);
  assert.equal(s.next(new Set(['a:1', 'b:1']), NONE, 0).address, 'c:1');
  assert.equal(s.next(new Set(['a:1']), new Set(['b:1']), 0).address, 'b:1');
  // Every address linked (a probe): the round goes on over all of them.
  const all = new Set(['a:1', 'b:1', 'c:1']);
  assert.deepEqual(
    [0, 1, 2].map(() => s.next(all, NONE, 0).address),
    ['c:1', 'a:1', 'b:1'],
  );
});

test('a failed address waits out its own growing backoff; the others are dialled meanwhile', LIMIT, () => {
  const s = new ServerAddresses(['a:1', 'b:1', 'c:1'], BACKOFF, () => 0);
  const linked = new Set(['a:1']);
  s.failed('b:1', undefined, 0);
  assert.deepEqual(s.next(linked, NONE, 0), { address: 'c:1', waitMs: 0 });
  s.failed('c:1', undefined, 0);
  // Both unlinked ones wait: the first due is named with its wait, not a duplicate dial to a:1.
  assert.deepEqual(s.next(linked, NONE, 500), { address: 'b:1', waitMs: 500 });
  assert.deepEqual(s.next(linked, NONE, 1000), { address: 'b:1', waitMs: 0 });
  s.failed('b:1', undefined, 1000);
  assert.deepEqual(s.next(linked, NONE, 1000), { address: 'c:1', waitMs: 0 });
  assert.deepEqual(s.next(new Set(['a:1', 'c:1']), NONE, 1000), { address: 'b:1', waitMs: 2000 }, 'its second step is twice the first');
  s.succeeded('b:1');
  assert.deepEqual(s.next(new Set(['a:1', 'c:1']), NONE, 1000), { address: 'b:1', waitMs: 0 });
  s.failed('b:1', 50, 1000);
  assert.deepEqual(s.next(new Set(['a:1', 'c:1']), new Set(['b:1']), 1000), { address: 'b:1', waitMs: 50 }, 'a waiting session retries soon');
});
