// The resend buffer of a resumable session (pkg/mux/resend-buffer.ts): packets
// by sequence number until acknowledged, replayed from the peer's count, kept
// by reference, bounded.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ResumeError } from '../../pkg/protocol/errors.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { ResendBuffer } from '../../pkg/mux/resend-buffer.js';

type Entry = { connectID: bigint; data: Buffer } | KnownPacket;

function replayed(b: ResendBuffer, from: number): Entry[] {
  const out: Entry[] = [];
  b.replay(
    from,
    (connectID, data) => out.push({ connectID, data }),
    (packet) => out.push(packet),
  );
  return out;
}

test('packets are numbered from 0 in order; acknowledging lets the oldest go and frees their bytes', () => {
  const b = new ResendBuffer();
  const d1 = Buffer.from('hello');
  const d2 = Buffer.alloc(1000);
  const close: KnownPacket = { type: 'CLOSE_REQ', connectID: 7n };
  assert.equal(b.appendData(7n, d1), 0);
  assert.equal(b.appendControl(close), 1);
  assert.equal(b.appendData(8n, d2), 2);
  assert.deepEqual([b.next, b.acknowledged, b.length, b.dataBytes, b.controlPackets], [3, 0, 3, 1005, 1]);
  b.acknowledge(2);
  assert.deepEqual([b.next, b.acknowledged, b.length, b.dataBytes, b.controlPackets], [3, 2, 1, 1000, 0]);
  b.acknowledge(1); // an older acknowledgement changes nothing
  assert.deepEqual([b.acknowledged, b.length], [2, 1]);
  b.acknowledge(3);
  assert.deepEqual([b.acknowledged, b.length, b.dataBytes], [3, 0, 0]);
});

test("replay hands back the very Buffers and packets appended, from the peer's count on", () => {
  const b = new ResendBuffer();
  const payloads = [Buffer.from('a'), Buffer.from('bb'), Buffer.from('ccc')];
  const dial: KnownPacket = { type: 'DIAL_RSP', random: 5n, connectID: 3n, error: '' };
  b.appendControl(dial);
  for (const p of payloads) b.appendData(3n, p);
  const all = replayed(b, 0);
  assert.equal(all[0], dial, 'the same packet object');
  for (let i = 0; i < 3; i++) assert.equal((all[i + 1] as { data: Buffer }).data, payloads[i], 'the same Buffer: no copy');
  assert.deepEqual(replayed(b, 2), [
    { connectID: 3n, data: payloads[1] },
    { connectID: 3n, data: payloads[2] },
  ]);
  assert.deepEqual(replayed(b, 4), [], 'the peer has everything');
  b.acknowledge(2);
  assert.deepEqual(replayed(b, 2).length, 2, 'a count equal to what it acknowledged is fine');
});

test('a count the peer cannot have, or an acknowledgement of packets never sent, is a typed error', () => {
  const b = new ResendBuffer();
  for (let i = 0; i < 5; i++) b.appendData(1n, Buffer.from([i]));
  b.acknowledge(3);
  for (const from of [2, 6, -1, 2.5, Number.NaN]) {
    assert.throws(
      () => replayed(b, from),
      (err: unknown) => {
        assert.ok(err instanceof ResumeError);
        assert.equal(err.code, 'YT_ERR_RESUME_BAD_COUNT');
        return true;
      },
      `from ${from}`,
    );
  }
  assert.throws(() => b.acknowledge(6), {
    name: 'ResumeError',
    code: 'YT_ERR_RESUME_ACK_AHEAD',
    message: 'the peer acknowledged 6 packets, but only 5 were sent',
  });
  assert.deepEqual([b.acknowledged, b.length], [3, 2], 'a refused acknowledgement changes nothing');
});

test('full once maxDataBytes are kept; control packets past their limit throw', () => {
  const b = new ResendBuffer({ maxDataBytes: 100, maxControlPackets: 2 });
  b.appendData(1n, Buffer.alloc(60));
  assert.equal(b.full, false);
  b.appendData(1n, Buffer.alloc(40));
  assert.equal(b.full, true);
  b.acknowledge(1);
  assert.equal(b.full, false);
  b.appendControl({ type: 'CLOSE_WRITE', connectID: 1n });
  b.appendControl({ type: 'CLOSE_WRITE', connectID: 2n });
  assert.throws(() => b.appendControl({ type: 'CLOSE_WRITE', connectID: 3n }), {
    name: 'ResumeError',
    code: 'YT_ERR_RESUME_BUFFER_FULL',
    message: "2 control packets wait for the peer's acknowledgement (limit 2); the peer does not acknowledge",
  });
  assert.equal(b.next, 4, 'the refused packet got no number');
  assert.throws(() => new ResendBuffer({ maxDataBytes: 0 }), TypeError);
});

test('through growth and wrap-around the ring agrees with a plain list, and gives its room back once idle', () => {
  const b = new ResendBuffer();
  const model: Entry[] = [];
  let base = 0;
  let seed = 7;
  const random = (n: number): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed % n;
  };
  for (let step = 0; step < 20_000; step++) {
    const r = random(10);
    if (r < 6) {
      const n = random(5000);
      const burst = step % 4000 < 50 ? 40 : 1; // bursts grow the ring
      for (let k = 0; k < burst; k++) {
        if (random(3) === 0) {
          const p: KnownPacket = { type: 'WINDOW_UPDATE', connectID: BigInt(n), bytes: 1n };
          b.appendControl(p);
          model.push(p);
        } else {
          const d = Buffer.alloc(n % 17);
          b.appendData(BigInt(n), d);
          model.push({ connectID: BigInt(n), data: d });
        }
      }
    } else if (r < 9) {
      const upTo = base + random(model.length - base + 1);
      b.acknowledge(upTo);
      base = Math.max(base, upTo);
    } else {
      const from = base + random(model.length - base + 1);
      const got = replayed(b, from);
      assert.equal(got.length, model.length - from);
      got.forEach((e, i) => {
        const m = model[from + i]!;
        if ('data' in e && 'data' in m && !('type' in m)) assert.equal(e.data, m.data);
        else assert.equal(e, m);
      });
    }
    assert.equal(b.next, model.length);
    assert.equal(b.acknowledged, base);
    let bytes = 0;
    for (let i = base; i < model.length; i++) {
      const m = model[i]!;
      if (!('type' in m)) bytes += m.data.length;
    }
    assert.equal(b.dataBytes, bytes);
  }
  for (let i = 0; i < 5000; i++) b.appendData(1n, Buffer.alloc(1));
  assert.ok(b.capacity >= 5000);
  b.acknowledge(b.next);
  assert.ok(b.capacity <= 64, `an empty ring is small again (${b.capacity} slots)`);
});

test('clear lets everything go and numbering goes on', () => {
  const b = new ResendBuffer();
  b.appendData(1n, Buffer.alloc(10));
  b.appendControl({ type: 'DRAIN' });
  b.clear();
  assert.deepEqual([b.length, b.dataBytes, b.controlPackets, b.acknowledged, b.next], [0, 0, 0, 2, 2]);
  assert.equal(b.appendData(1n, Buffer.alloc(1)), 2);
});

test('what a replay callback appends is not part of that replay, even when the ring grows under it', () => {
  const b = new ResendBuffer();
  for (let i = 0; i < 60; i++) b.appendData(1n, Buffer.from([i]));
  const seen: number[] = [];
  b.replay(
    0,
    (_id, data) => {
      seen.push(data[0]!);
      // A writer let go by the replay sends at once; 60 more packets double the ring.
      b.appendData(2n, Buffer.from([200]));
    },
    () => assert.fail('no control packets here'),
  );
  assert.deepEqual(
    seen,
    Array.from({ length: 60 }, (_, i) => i),
  );
  assert.equal(b.next, 120);
  assert.ok(b.capacity > 64, 'the ring grew during the replay');
  assert.equal(replayed(b, 60).length, 60, 'the new packets are there for the next replay');
});

test('a buffer that never held a packet keeps no ring (an idle agent link costs its server none), nor one that was cleared', () => {
  const b = new ResendBuffer();
  assert.equal(b.capacity, 0);
  assert.deepEqual(replayed(b, 0), []);
  b.acknowledge(0);
  assert.equal(b.appendControl({ type: 'CLOSE_REQ', connectID: 1n }), 0);
  assert.equal(b.appendData(1n, Buffer.from('x')), 1);
  assert.equal(b.capacity, 64);
  assert.equal(replayed(b, 0).length, 2);
  b.clear();
  assert.equal(b.capacity, 0);
  assert.equal(b.appendData(2n, Buffer.from('y')), 2, 'numbering goes on');
  assert.deepEqual(replayed(b, 2), [{ connectID: 2n, data: Buffer.from('y') }]);
});
