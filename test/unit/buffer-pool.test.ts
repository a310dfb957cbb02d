// The slab pool (pkg/mux/buffer-pool.ts) and the holders that must keep a
// pooled payload until nothing can read it: the resend buffer until the peer
// acknowledges, the packet stream until HTTP/2 has written it. Pools here
// poison what comes back, so a release too early shows as corrupt bytes.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  BufferPool,
  holdable,
  isPooled,
  MAX_HELD_PER_BYTE,
  POISON_BYTE,
  releaseSlab,
  retainSlab,
  SLAB_HEADROOM,
  SLAB_PAYLOAD,
  SLAB_SIZE,
  slabWithRoom,
  writeHolding,
} from '../../pkg/mux/buffer-pool.js';
import { ResendBuffer } from '../../pkg/mux/resend-buffer.js';
import { GRPC_FRAME_HEADER_SIZE } from '../../pkg/grpc/frame.js';
import { dataHeaderLength } from '../../pkg/protocol/codec.js';
import { memoryLinkPair } from '../support/memory-link.js';

/** A pooled payload of `n` bytes holding a pattern, as a read would leave it (retained once, by the reader). */
function pooledPayload(pool: BufferPool, n: number, seed: number): Buffer {
  const view = pool.take().subarray(SLAB_HEADROOM, SLAB_HEADROOM + n);
  for (let i = 0; i < n; i++) view[i] = (i * 31 + seed) & 0xff;
  return view;
}

test('a slab comes back on its last release and is handed out again, not allocated anew', () => {
  const pool = new BufferPool({ poison: true });
  const a = pool.take();
  assert.equal(a.length, SLAB_SIZE);
  assert.ok(SLAB_SIZE >= SLAB_PAYLOAD + SLAB_HEADROOM);
  const view = a.subarray(SLAB_HEADROOM, SLAB_HEADROOM + 10);
  retainSlab(view);
  releaseSlab(a);
  assert.equal(pool.outstanding, 1, 'one holder left: not back yet');
  assert.ok(isPooled(view));
  releaseSlab(view);
  assert.equal(pool.outstanding, 0);
  assert.equal(pool.freeCount, 1);
  assert.ok(!isPooled(view), 'a slab in the free list is not handed out');
  assert.ok(
    a.every((b) => b === POISON_BYTE),
    'poisoned when it came back',
  );
  const b = pool.take();
  assert.equal(b.buffer, a.buffer, 'the same memory again');
  assert.equal(pool.allocated, 1);
  releaseSlab(b);
});

test('the largest gRPC prefix and DATA header fit the room in front of a slab', () => {
  // connectID -1 is the longest varint there is (10 bytes).
  assert.ok(GRPC_FRAME_HEADER_SIZE + dataHeaderLength(-1n, SLAB_PAYLOAD) <= SLAB_HEADROOM);
});

test('a slab released twice, or retained once back, is a bug that throws', () => {
  const pool = new BufferPool();
  const a = pool.take();
  releaseSlab(a);
  assert.throws(() => releaseSlab(a), /released more often than retained/);
  assert.throws(() => retainSlab(a), /retained after it went back/);
});

test('ordinary Buffers pass through retain and release untouched', () => {
  const plain = Buffer.from('hello');
  retainSlab(plain);
  releaseSlab(plain);
  releaseSlab(plain);
  assert.ok(!isPooled(plain));
  assert.equal(plain.toString(), 'hello');
});

test('the pool keeps at most maxFree slabs; more coming back are left to the GC', () => {
  const pool = new BufferPool({ maxFree: 2 });
  const slabs = [pool.take(), pool.take(), pool.take(), pool.take()];
  for (const s of slabs) releaseSlab(s);
  assert.equal(pool.freeCount, 2);
  assert.equal(pool.outstanding, 0);
});

test('slabs past keepFree stay while traffic takes them again, and are given up once a trim interval passes without need', () => {
  const pool = new BufferPool({ keepFree: 2, maxFree: 8, trimIntervalMs: 3_600_000 });
  const burst = (n: number): Buffer[] => Array.from({ length: n }, () => pool.take());
  for (const s of burst(6)) releaseSlab(s);
  assert.equal(pool.freeCount, 6, 'a burst of 6 leaves 6 to reuse (keepFree alone would keep 2)');
  assert.equal(pool.allocated, 6);
  const again = burst(3);
  assert.equal(pool.allocated, 6, 'the next burst finds them');
  for (const s of again) releaseSlab(s);
  pool.trim();
  assert.equal(pool.freeCount, 3, 'three were taken in the interval, so three past keepFree were not needed and go');
  pool.trim();
  assert.equal(pool.freeCount, 2, 'an interval with no traffic leaves keepFree');
  pool.trim();
  assert.equal(pool.freeCount, 2, 'keepFree stays');
  for (const s of burst(9)) releaseSlab(s);
  assert.equal(pool.freeCount, 8, 'never more than maxFree');
});

test('the trim runs by itself every trimIntervalMs and stops when keepFree is left', async () => {
  const pool = new BufferPool({ keepFree: 1, maxFree: 4, trimIntervalMs: 5 });
  for (const s of [pool.take(), pool.take(), pool.take(), pool.take()]) releaseSlab(s);
  assert.equal(pool.freeCount, 4);
  const trimmed = (): boolean => pool.freeCount === 1;
  for (let i = 0; i < 400 && !trimmed(); i++) await new Promise((r) => setTimeout(r, 5));
  assert.ok(trimmed(), `${pool.freeCount} free slabs left, keepFree is 1`);
});

test('writeHolding holds the slab a chunk views until the write calls back, then calls after; a plain chunk is a plain write', () => {
  const pool = new BufferPool({ poison: true });
  const pending: Array<(err?: Error | null) => void> = [];
  const writer = {
    write(_chunk: Buffer, cb?: (err?: Error | null) => void): boolean {
      if (cb !== undefined) pending.push(cb);
      return true;
    },
  };
  const data = pooledPayload(pool, 100, 3);
  let after = 0;
  writeHolding(writer, data.subarray(0, 10), data, () => after++);
  releaseSlab(data);
  assert.equal(pool.outstanding, 1, 'the write holds it after the reader let go');
  pending.shift()!();
  assert.equal(pool.outstanding, 0, 'back once the write called back');
  assert.equal(after, 1);
  writeHolding(writer, Buffer.from('plain'));
  assert.equal(pending.length, 0, 'no callback needed for a chunk outside the pool');
});

test('holdable copies a view smaller than 1/MAX_HELD_PER_BYTE of its memory into memory of its own, and keeps larger views as they are', () => {
  const read = Buffer.allocUnsafeSlow(64 * 1024).fill(7);
  const small = read.subarray(100, 101);
  const copy = holdable(small);
  assert.notEqual(copy.buffer, read.buffer);
  assert.equal(copy.buffer.byteLength, 1, 'its own memory, not a share of the 8 KiB Buffer pool');
  assert.deepEqual(copy, small);
  const quarter = read.subarray(0, read.length / MAX_HELD_PER_BYTE);
  assert.equal(holdable(quarter), quarter, 'a quarter of its memory stays a view');
  assert.equal(holdable(read.subarray(0, 0)).buffer.byteLength, 0, 'an empty view keeps nothing');
  // A small view of a pooled slab is copied out (nothing to retain); a bulk one stays the slab's.
  const pool = new BufferPool({ poison: true });
  const payload = pooledPayload(pool, SLAB_PAYLOAD, 5);
  assert.equal(isPooled(holdable(payload.subarray(0, 10))), false);
  assert.equal(holdable(payload), payload);
  releaseSlab(payload);
});

test('the resend buffer keeps a pooled payload intact until the peer acknowledges it', () => {
  const pool = new BufferPool({ poison: true });
  const buffer = new ResendBuffer();
  const data = pooledPayload(pool, 1000, 7);
  const expected = Buffer.from(data);
  buffer.appendData(1n, data);
  // The reader is done with it (as the relay is once the link took it).
  releaseSlab(data);
  const replayed: Buffer[] = [];
  buffer.replay(
    0,
    (_id, d) => replayed.push(Buffer.from(d)),
    () => {},
  );
  assert.deepEqual(replayed, [expected], 'replayed as read, not poisoned');
  assert.equal(pool.outstanding, 1);
  buffer.acknowledge(1);
  assert.equal(pool.outstanding, 0, 'back in the pool once acknowledged');

  const kept = pooledPayload(pool, 10, 1);
  buffer.appendData(2n, kept);
  releaseSlab(kept);
  buffer.clear();
  assert.equal(pool.outstanding, 0, 'back in the pool when the session ends');
});

test('the packet stream keeps a pooled payload until HTTP/2 has written it', async (t) => {
  const pool = new BufferPool({ poison: true });
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const N = 64;
  const expected: Buffer[] = [];
  // Checked as they arrive: a payload joined on the way in is the receiver's only while its packet is handled.
  const got = new Promise<boolean[]>((resolve) => {
    const all: boolean[] = [];
    pair.onServerPacket((p) => {
      all.push(p.type === 'DATA' && p.data.equals(expected[all.length]!));
      if (all.length === N) resolve(all);
    });
  });
  for (let i = 0; i < N; i++) {
    const data = pooledPayload(pool, SLAB_PAYLOAD, i);
    // Every other one a later piece of a chunk the relay split (bytes of the slab in front of it).
    const piece = i % 2 === 0 ? data : data.subarray(100);
    expected.push(Buffer.from(piece));
    pair.agent.sendData(9n, piece, () => {});
    // The reader lets go at once: only the stream's own hold keeps the bytes until they are written.
    releaseSlab(data);
  }
  const arrivedAsRead = await got;
  assert.equal(arrivedAsRead.length, N);
  arrivedAsRead.forEach((ok, i) => assert.ok(ok, `packet ${i} arrived as read`));
  // HTTP/2 calls its writes back once the transport took them: a few turns of the loop after the peer has them.
  for (let i = 0; i < 1000 && pool.outstanding > 0; i++) await new Promise((r) => setImmediate(r));
  assert.equal(pool.outstanding, 0, 'every slab back once written');
});

test('a slab of joined messages has no room for framing in front of any view: a view SLAB_HEADROOM in is a later piece', () => {
  const reads = new BufferPool({ poison: true });
  const joins = new BufferPool({ poison: true, framingRoom: false });
  const read = reads.take();
  const joined = joins.take();
  assert.equal(slabWithRoom(read.subarray(SLAB_HEADROOM)), read, 'a read lands SLAB_HEADROOM in, the room in front free');
  // A message joined from the slab's first byte: a piece of its payload that starts SLAB_HEADROOM in has payload bytes in front.
  assert.equal(slabWithRoom(joined.subarray(SLAB_HEADROOM)), undefined);
  assert.ok(isPooled(joined.subarray(SLAB_HEADROOM)), 'still held like any pooled view');
  releaseSlab(read);
  releaseSlab(joined);
});
