// The resume memory one server's links share (pkg/mux/resume-budget.ts): what
// every ResendBuffer keeps is charged once and released once; once it is
// spent the writers of every link wait after their packet, and go on, oldest
// waiter first, when any link's acknowledgement or ended session makes room.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { ResendBuffer } from '../../pkg/mux/resend-buffer.js';
import { ResumableLink } from '../../pkg/mux/resumable-link.js';
import { ResumeBudget } from '../../pkg/mux/resume-budget.js';
import { harness } from '../support/harness.js';
import { RecordingLink } from '../support/recording-link.js';

test('charged and released by what buffers keep; spent at the limit; the highest mark is kept', () => {
  const budget = new ResumeBudget(1000);
  const a = new ResendBuffer({ budget });
  const b = new ResendBuffer({ budget });
  a.appendData(1n, Buffer.alloc(300));
  a.appendControl({ type: 'DIAL_CLS', random: 1n });
  a.appendData(1n, Buffer.alloc(300));
  b.appendData(2n, Buffer.alloc(399));
  assert.deepEqual([budget.used, budget.exhausted], [999, false]);
  b.appendData(2n, Buffer.alloc(1));
  assert.deepEqual([budget.used, budget.exhausted], [1000, true]);
  a.acknowledge(2); // one DATA and the control packet
  assert.equal(budget.used, 700);
  a.acknowledge(2); // already acknowledged: nothing released twice
  assert.equal(budget.used, 700);
  b.clear();
  assert.equal(budget.used, 300);
  b.clear();
  assert.equal(budget.used, 300, 'a second clear releases nothing');
  a.acknowledge(3);
  assert.deepEqual([budget.used, budget.peak], [0, 1000]);
  for (const bad of [0, -1, 1.5, NaN]) assert.throws(() => new ResumeBudget(bad), TypeError);
});

test('waiting links are woken oldest first, on a microtask after room is made, and only while there is room', async () => {
  const budget = new ResumeBudget(100);
  const woken: string[] = [];
  budget.charge(100);
  const first = (): void => {
    woken.push('first');
  };
  const second = (): void => {
    woken.push('second');
    budget.charge(60); // spends it again: the third waits on
  };
  const third = (): void => {
    woken.push('third');
  };
  budget.waitForRoom(first);
  budget.waitForRoom(second);
  budget.waitForRoom(third);
  budget.waitForRoom(first); // once per link
  assert.equal(budget.waits, 3);
  budget.release(10);
  assert.deepEqual(woken, [], 'not inside release()');
  await tick();
  assert.deepEqual(woken, ['first', 'second']);
  budget.release(60);
  await tick();
  assert.deepEqual(woken, ['first', 'second', 'third']);
  budget.cancelWait(first);
  budget.charge(50);
  budget.waitForRoom(first);
  budget.cancelWait(first);
  budget.release(100);
  await tick();
  assert.deepEqual(woken, ['first', 'second', 'third'], 'a cancelled waiter is not woken');
});

test('onExhausted runs after the charge that spends the budget (not inside it), and on recheck() while it is spent', async () => {
  let calls = 0;
  const budget = new ResumeBudget(100, { onExhausted: () => calls++ });
  budget.charge(99);
  budget.recheck();
  await tick();
  assert.equal(calls, 0);
  budget.charge(1);
  budget.charge(1);
  assert.equal(calls, 0, 'not inside charge()');
  await tick();
  assert.equal(calls, 1, 'once for both charges');
  budget.recheck();
  await tick();
  assert.equal(calls, 2);
});

/** Sends `bytes` on `link`; `done` turns true when the writer may write again. */
function write(link: ResumableLink, connectID: bigint, bytes: number): { done: boolean; err?: Error | null } {
  const w: { done: boolean; err?: Error | null } = { done: false };
  link.sendData(connectID, Buffer.alloc(bytes), (err) => {
    w.done = true;
    w.err = err;
  });
  return w;
}

function ack(link: ResumableLink, transport: RecordingLink, received: number): void {
  link.receive(transport, { type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: BigInt(received) });
}

test('links sharing a spent budget: one keeping its share waits below its own cap; one below an equal share goes on', async (t) => {
  const h = harness(t);
  const budget = new ResumeBudget(1000);
  const ta = new RecordingLink();
  const tb = new RecordingLink();
  const a = new ResumableLink({ onPacket: () => {}, onBroken: (err) => assert.fail(err), budget });
  const b = new ResumableLink({ onPacket: () => {}, onBroken: (err) => assert.fail(err), budget });
  h.defer(() => {
    a.close();
    b.close();
  });
  a.attach(ta, 0);
  b.attach(tb, 0);
  const a1 = write(a, 1n, 600);
  assert.equal(a1.done, true, 'room in the budget: the writer goes on');
  const a2 = write(a, 2n, 500);
  assert.equal(a2.done, false, 'the packet went out, its writer waits: the budget is spent, far below the 32 MiB cap');
  assert.equal(ta.data.length, 2, 'nothing is held back or dropped');

  // a (an agent that does not acknowledge) spent the budget; b keeps less than an equal share (500).
  const b1 = write(b, 3n, 10);
  assert.equal(b1.done, true, 'below an equal share of the spent budget, the other link goes on');
  const b2 = write(b, 3n, 600);
  assert.equal(b2.done, false, 'keeping its share (610 of 1000, two links), it waits too');
  assert.deepEqual([budget.used, budget.waits], [1710, 2]);

  // b's own acknowledgements let it go on, though a still keeps the budget spent.
  ack(b, tb, 1);
  assert.equal(b2.done, false, 'still 600 kept: at least its share');
  ack(b, tb, 2);
  assert.deepEqual([b2.done, budget.exhausted], [true, true]);

  // b fills its share again and waits; its session ends: its bytes come back once.
  const b3 = write(b, 3n, 600);
  assert.equal(b3.done, false);
  b.close();
  assert.equal(b3.err?.message, 'the tunnel session is closed');
  assert.equal(budget.used, 1100);

  // a's peer acknowledges its first packet: room again, and a's writer goes on.
  ack(a, ta, 1);
  assert.equal(budget.used, 500);
  await tick();
  assert.deepEqual([a2.done, a2.err], [true, undefined]);
  a.close();
  assert.equal(budget.used, 0, 'every byte released exactly once');
});

test('a suspended link is not woken by the budget; a resume that acknowledges everything lets its writers go on', async (t) => {
  const h = harness(t);
  const budget = new ResumeBudget(1000);
  const t1 = new RecordingLink();
  const link = new ResumableLink({ onPacket: () => {}, onBroken: (err) => assert.fail(err), budget });
  h.defer(() => link.close());
  link.attach(t1, 0);
  assert.equal(write(link, 1n, 600).done, true);
  const other = new ResendBuffer({ budget });
  other.appendData(9n, Buffer.alloc(500));
  const w = write(link, 1n, 10);
  assert.equal(w.done, false);
  link.detach();
  // Another owner makes room: the suspended link's writer still waits for its transport.
  other.clear();
  assert.equal(budget.used, 610);
  await tick();
  assert.equal(w.done, false);
  // The peer had it all: the resume acknowledges it, and no acknowledgement will follow.
  link.attach(new RecordingLink(), 2);
  assert.equal(budget.used, 0);
  await tick();
  assert.equal(w.done, true);
});
