// One multiplexed connection over a packet link as a Duplex (PacketConn), with
// either side's close handshake: the server's TunnelConn (ends with CLOSE_REQ,
// waits for CLOSE_RSP) and an agent-side subclass owing exactly one CLOSE_RSP
// (the agent itself joins its sockets with a SocketRelay: socket-relay.test).
// The link is a recording fake, so every packet and every pause/resume of the
// shared stream is counted.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { BufferPool, releaseSlab } from '../../pkg/mux/buffer-pool.js';
import { ConnTable, TOMBSTONE_MS } from '../../pkg/mux/conn-table.js';
import { AGENT_CLOSE } from '../../pkg/mux/close-handshake.js';
import { PacketConn, type PacketConnOptions } from '../../pkg/mux/packet-conn.js';
import { MAX_AUTO_WINDOW } from '../../pkg/protocol/receive-window.js';
import { PauseGate } from '../../pkg/mux/pause-gate.js';
import { ConnectionClosedError } from '../../pkg/protocol/errors.js';
import { emptyIdentifiers } from '../../pkg/protocol/identifiers.js';
import { Backend } from '../../pkg/tunnel/backend.js';
import { TunnelConn } from '../../pkg/tunnel/tunnel-conn.js';
import { exposedGc } from '../support/gc.js';
import { harness, type Harness } from '../support/harness.js';
import { payloads, prng } from '../support/payload-mix.js';
import { RecordingLink } from '../support/recording-link.js';

const LIMIT = { timeout: 10_000 };

function tunnelConn(
  h: Harness,
  link: RecordingLink,
  connectID = 9n,
  opts: { highWaterMark?: number; closeTimeoutMs?: number } = {},
  agent: { halfClose?: boolean } = {},
): TunnelConn {
  const backend = new Backend(
    { agentID: 'node-a', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:40000', certSubject: 'CN=tunnel-agent-client', ...agent },
    link,
  );
  const conn = new TunnelConn(backend, connectID, '10.0.0.5:10250', opts);
  h.defer(() => conn.destroy());
  return conn;
}

/** A PacketConn with the agent's close handshake: one CLOSE_RSP, however it ends. */
class AgentSideConn extends PacketConn {
  constructor(
    link: RecordingLink,
    connectID: bigint,
    readonly address: string,
    opts?: PacketConnOptions,
  ) {
    super(link, connectID, AGENT_CLOSE, opts);
  }
}

function endpointConn(h: Harness, link: RecordingLink, connectID = 7n, opts: { highWaterMark?: number; closeTimeoutMs?: number } = {}): AgentSideConn {
  const conn = new AgentSideConn(link, connectID, '10.0.0.5:10250', opts);
  h.defer(() => conn.destroy());
  return conn;
}

/** Resolves on 'close', whether or not an 'error' came first (events.once would reject). */
function closed(conn: PacketConn): Promise<void> {
  return new Promise((resolve) => conn.once('close', () => resolve()));
}

/**
 * The close timer is unref'd, so a test waiting only for it would let the
 * event loop run dry; this ref'd timer keeps it alive until the test ends.
 */
function keepAlive(h: Harness): void {
  const timer = setTimeout(() => {}, LIMIT.timeout);
  h.defer(() => clearTimeout(timer));
}

// --- writes ---------------------------------------------------------------

test('back-pressure: while the link holds its callback, write() returns false, and drain follows once it is taken', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  link.holdCallbacks = true;
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 64 });
  let drains = 0;
  conn.on('drain', () => drains++);
  assert.equal(conn.write(Buffer.alloc(32)), true);
  assert.equal(conn.write(Buffer.alloc(32)), false);
  // The second chunk waits for the first one's callback.
  assert.equal(link.data.length, 1);
  link.releaseOne();
  assert.equal(link.data.length, 2);
  await tick();
  assert.equal(drains, 0, 'drain before the link took the last chunk');
  const drained = once(conn, 'drain');
  link.releaseOne();
  await drained;
  assert.equal(drains, 1);
  assert.equal(link.pendingCallbacks, 0);
});

test("sendHighWaterMark bounds what writers may queue, apart from the receive side's highWaterMark", LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  link.holdCallbacks = true;
  const conn = new AgentSideConn(link, 8n, '10.0.0.5:10250', { highWaterMark: 256, sendHighWaterMark: 64 });
  h.defer(() => conn.destroy());
  assert.equal(conn.writableHighWaterMark, 64);
  assert.equal(conn.readableHighWaterMark, 256);
  assert.equal(conn.write(Buffer.alloc(32)), true);
  assert.equal(conn.write(Buffer.alloc(32)), false, 'writers wait once 64 bytes are queued');
  const plain = endpointConn(h, new RecordingLink(), 9n, { highWaterMark: 256 });
  assert.equal(plain.writableHighWaterMark, 256, 'without it, highWaterMark applies to both sides');
  link.releaseOne();
  link.releaseOne();
});

// --- reads and the shared link's pause ------------------------------------

test('deliver() beyond the highWaterMark pauses the link exactly once; reading resumes it exactly once', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 16 });
  conn.deliver(Buffer.alloc(10, 'a'));
  assert.equal(link.pauses, 0);
  conn.deliver(Buffer.alloc(10, 'b'));
  assert.equal(link.pauses, 1);
  conn.deliver(Buffer.alloc(10, 'c'));
  conn.deliver(Buffer.alloc(10, 'd'));
  await tick();
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 0);
  assert.equal(conn.bytesReceived, 40);

  const read = conn.read() as Buffer;
  assert.equal(read.toString(), 'a'.repeat(10) + 'b'.repeat(10) + 'c'.repeat(10) + 'd'.repeat(10));
  assert.equal(link.resumes, 1);
  // More traffic below the mark and more reads change nothing.
  conn.deliver(Buffer.from('e'));
  assert.equal((conn.read() as Buffer).toString(), 'e');
  assert.equal(conn.read(), null);
  await tick();
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

test('a flowing reader takes delivered data without ever pausing the link', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { highWaterMark: 16 });
  const got: Buffer[] = [];
  conn.on('data', (c: Buffer) => got.push(c));
  await tick(); // now flowing
  for (let i = 0; i < 10; i++) conn.deliver(Buffer.alloc(8, i));
  await tick();
  assert.equal(Buffer.concat(got).length, 80);
  assert.equal(link.pauses, 0);
  assert.equal(link.resumes, 0);
});

test('destroy while paused releases the pause, once', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 4 });
  conn.deliver(Buffer.alloc(8));
  assert.equal(link.pauses, 1);
  conn.destroy();
  await closed(conn);
  assert.equal(link.resumes, 1);
  conn.deliver(Buffer.alloc(8));
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

test('destroy after reading resumed the link does not resume it again', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { highWaterMark: 4 });
  conn.deliver(Buffer.alloc(8));
  conn.read();
  assert.equal(link.resumes, 1);
  conn.destroy();
  await closed(conn);
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

// --- TunnelConn: the server side ------------------------------------------

test('TunnelConn end() twice, then destroy(), still sends one CLOSE_REQ', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n);
  conn.resume();
  conn.end();
  conn.end();
  await once(conn, 'finish');
  conn.destroy();
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_REQ', connectID: 9n }]);
});

test(
  'TunnelConn destroyed with an error tells an agent that negotiated half-close why (its CLOSE_REQ carries the error); a normal end does not',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    const failed = tunnelConn(h, link, 9n, {}, { halfClose: true });
    failed.on('error', () => {});
    failed.destroy(new Error('read ECONNRESET'));
    await closed(failed);
    const normal = tunnelConn(h, link, 10n, {}, { halfClose: true });
    normal.destroy();
    await closed(normal);
    assert.deepEqual(link.control, [
      { type: 'CLOSE_REQ', connectID: 9n, error: 'read ECONNRESET' },
      { type: 'CLOSE_REQ', connectID: 10n },
    ]);
  },
);

test('the close timer destroys a connection whose local reader never takes the end', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { closeTimeoutMs: 30 });
  keepAlive(h);
  conn.deliver(Buffer.from('unread'));
  conn.remoteClose();
  const [err] = (await once(conn, 'error')) as [unknown];
  assert.ok(err instanceof ConnectionClosedError);
  assert.equal(err.message, 'connection 7 did not finish closing within 30 ms; dropped');
  // The CLOSE_RSP answers the server's CLOSE_REQ: no error text, since the peer asked.
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
});

// --- the agent's close handshake on a PacketConn -----------------------------------------

test('An agent-side PacketConn destroyed with an error sends one CLOSE_RSP carrying the error text', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n);
  const errors: unknown[] = [];
  conn.on('error', (e) => errors.push(e));
  conn.destroy(new Error('read tcp 10.0.0.5:10250: connection reset by peer'));
  conn.destroy(new Error('second'));
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: 'read tcp 10.0.0.5:10250: connection reset by peer' }]);
  assert.equal(errors.length, 1);
});

test('An agent-side PacketConn destroyed without an error sends one CLOSE_RSP with no error text', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n);
  conn.destroy();
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
});

// --- ConnTable ------------------------------------------------------------

test('ConnTable: remove before the peer closed leaves a tombstone; after, none', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const open = endpointConn(h, link, 1n);
  const peerClosed = endpointConn(h, link, 2n);
  table.add(open);
  table.add(peerClosed);
  assert.equal(table.size, 2);
  assert.equal(table.get(1n), open);

  assert.equal(table.remove(open), true);
  assert.equal(table.get(1n), undefined);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.isTombstoned(1n), true);

  peerClosed.remoteClose();
  assert.equal(table.remove(peerClosed), true);
  assert.equal(table.isTombstoned(2n), false);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.size, 0);

  assert.equal(table.remove(open), false, 'second remove');
  assert.equal(table.tombstoneCount, 1);
});

test('ConnTable: remove() of a connection that is no longer the entry for its ID does nothing', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const old = endpointConn(h, link, 5n);
  const current = endpointConn(h, link, 5n);
  table.add(old);
  table.add(current);
  assert.equal(table.remove(old), false);
  assert.equal(table.get(5n), current);
  assert.equal(table.tombstoneCount, 0);
});

test('ConnTable: takeTombstone() consumes the tombstone once', LIMIT, (t) => {
  const h = harness(t);
  const table = new ConnTable<AgentSideConn>();
  table.add(endpointConn(h, new RecordingLink(), 3n));
  table.remove(table.get(3n)!);
  assert.equal(table.takeTombstone(3n), true);
  assert.equal(table.takeTombstone(3n), false);
  assert.equal(table.isTombstoned(3n), false);
  assert.equal(table.takeTombstone(99n), false);
});

test('ConnTable: tombstones expire TOMBSTONE_MS after removal, by sweep() or on lookup', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const a = endpointConn(h, link, 1n);
  const b = endpointConn(h, link, 2n);
  table.add(a);
  table.add(b);
  table.remove(a, 1000);
  table.remove(b, 2000);
  assert.equal(table.tombstoneCount, 2);

  table.sweep(1000 + TOMBSTONE_MS);
  assert.equal(table.tombstoneCount, 2, 'expired at the exact deadline');
  table.sweep(1000 + TOMBSTONE_MS + 1);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.isTombstoned(1n, 1000 + TOMBSTONE_MS + 1), false);

  assert.equal(table.isTombstoned(2n, 2000 + TOMBSTONE_MS), true);
  assert.equal(table.isTombstoned(2n, 2000 + TOMBSTONE_MS + 1), false);
  assert.equal(table.tombstoneCount, 0, 'an expired tombstone found on lookup is forgotten');
});

test('ConnTable: add() over a tombstone clears it; takeAll() empties everything', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const a = endpointConn(h, link, 1n);
  table.add(a);
  table.remove(a);
  const again = endpointConn(h, link, 1n);
  table.add(again);
  assert.equal(table.isTombstoned(1n), false);
  const b = endpointConn(h, link, 2n);
  table.add(b);
  table.remove(b);
  assert.deepEqual(table.takeAll(), [again]);
  assert.equal(table.size, 0);
  assert.equal(table.tombstoneCount, 0);
});

// --- PauseGate ------------------------------------------------------------

test('PauseGate pauses on the first holder, resumes after the last, counting each holder once', LIMIT, () => {
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const a = {};
  const b = {};
  gate.hold(a);
  gate.hold(a);
  gate.hold(b);
  assert.equal(pauses, 1);
  assert.equal(gate.paused, true);
  gate.release(a);
  gate.release(a);
  assert.equal(resumes, 0, 'resumed while b still holds');
  assert.equal(gate.paused, true);
  gate.release(b);
  assert.equal(resumes, 1);
  assert.equal(gate.paused, false);
  gate.release(b);
  gate.release({});
  assert.equal(resumes, 1);
  gate.hold(b);
  assert.equal(pauses, 2);
});

test('PauseGate clear() forgets the holders without resuming', LIMIT, () => {
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const a = {};
  gate.hold(a);
  gate.clear();
  assert.equal(gate.paused, false);
  gate.release(a);
  assert.equal(resumes, 0);
  gate.hold(a);
  assert.equal(pauses, 2);
});

test('connections sharing a link through a PauseGate pause it once and resume it when the last reader catches up', LIMIT, async (t) => {
  const h = harness(t);
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const link = new RecordingLink();
  link.pauseReceive = (holder: object) => gate.hold(holder);
  link.resumeReceive = (holder: object) => gate.release(holder);
  const a = endpointConn(h, link, 1n, { highWaterMark: 4 });
  const b = endpointConn(h, link, 2n, { highWaterMark: 4 });
  a.deliver(Buffer.alloc(8));
  a.deliver(Buffer.alloc(8));
  b.deliver(Buffer.alloc(8));
  assert.equal(pauses, 1);
  a.read();
  assert.equal(resumes, 0);
  b.read();
  assert.equal(resumes, 1);
  await tick();
  assert.equal(pauses, 1);
});

// --- flow control (proto/yurttunnel_ext.proto) ----------------------------

const FLOW = { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 };

test('destroyed while a write waits for credit, every write is called back once: the waiting one and those queued behind it', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = new AgentSideConn(link, 5n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => conn.destroy());
  conn.on('error', () => {});
  const calls = [0, 0, 0];
  conn.write(Buffer.alloc(100 * 1024, 1), () => calls[0]!++);
  conn.write(Buffer.alloc(10, 2), () => calls[1]!++);
  conn.write(Buffer.alloc(10, 3), () => calls[2]!++);
  await tick();
  assert.deepEqual(calls, [0, 0, 0], 'the first waits for credit, the others behind it');
  const gone = closed(conn);
  conn.destroy();
  await gone;
  // A writer that holds a pooled slab until its write calls back (the gRPC frontend) gets it back.
  assert.deepEqual(calls, [1, 1, 1]);
});

test('a delivered payload that views a pooled slab is copied: the reader gets its bytes after the slab went back', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link);
  const pool = new BufferPool({ poison: true });
  const data = pool.take().subarray(0, 1000).fill(7);
  conn.deliver(data);
  releaseSlab(data);
  assert.equal(pool.outstanding, 0);
  const [chunk] = (await once(conn, 'data')) as [Buffer];
  assert.deepEqual(chunk, Buffer.alloc(1000, 7));
});

test('with flow control a peer that ignores the window makes the link pause, as without it', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = new AgentSideConn(link, 7n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => conn.destroy());
  for (let i = 0; i < 9; i++) conn.deliver(Buffer.alloc(8 * 1024, i)); // one chunk past the window
  assert.equal(link.pauses, 1);
  conn.resume();
  await tick();
  assert.equal(link.resumes, 1);
});

test('a reader that keeps up gets a wider window, up to MAX_AUTO_WINDOW; a slow one does not', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const fast = new AgentSideConn(link, 10n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => fast.destroy());
  fast.on('data', () => {});
  let granted = 0;
  // Feed window after window as grants come back; a flowing reader empties the buffer each time.
  for (let round = 0; round < 200 && granted < 20 * 1024 * 1024; round++) {
    fast.deliver(Buffer.alloc(16 * 1024));
    await tick();
    granted = link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' && p.connectID === 10n ? Number(p.bytes) : 0), 0);
  }
  const delivered = fast.bytesReceived;
  assert.ok(granted > delivered, `widened: granted ${granted} for ${delivered} consumed`);
  assert.ok(granted - delivered <= MAX_AUTO_WINDOW - FLOW.receiveWindow, 'never past MAX_AUTO_WINDOW');

  const slow = new AgentSideConn(link, 11n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => slow.destroy());
  for (let i = 0; i < 4; i++) slow.deliver(Buffer.alloc(8 * 1024));
  slow.read(16 * 1024); // a little is read; the buffer is never empty
  await tick();
  const slowGrants = link.control.filter((p) => p.type === 'WINDOW_UPDATE' && p.connectID === 11n);
  assert.ok(
    slowGrants.every((p) => p.type === 'WINDOW_UPDATE' && Number(p.bytes) <= 16 * 1024),
    'no widening for a reader that lags',
  );
});

test(
  'a window narrowed for a slow reader never leaves both sides waiting: a peer that used all its credit gets more as the reader takes',
  { timeout: 15_000 },
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    const announced = 128 * 1024;
    // A short measured round trip: the window narrows as soon as it takes over 500 ms to drain.
    const conn = new AgentSideConn(link, 12n, '10.0.0.5:10250', { flow: { sendWindow: announced, receiveWindow: announced, roundTripMs: () => 1 } });
    h.defer(() => conn.destroy());
    const granted = (): number => link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' && p.connectID === 12n ? Number(p.bytes) : 0), 0);
    let sent = 0;
    let taken = 0;
    const takenAt: Array<{ at: number; taken: number }> = [];
    const start = performance.now();
    // The peer sends whatever its credit allows every 10 ms; the reader takes 16 KiB every 100 ms (160 KiB/s).
    for (let step = 0; step < 300; step++) {
      const credit = announced + granted() - sent;
      if (credit > 0) {
        const n = Math.min(16 * 1024, credit);
        conn.deliver(Buffer.alloc(n, 1));
        sent += n;
      }
      if (step % 10 === 0) {
        const chunk = conn.read(Math.min(16 * 1024, conn.readableLength));
        taken += chunk?.length ?? 0;
        takenAt.push({ at: performance.now() - start, taken });
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const lastSecond = takenAt.filter((s) => s.at >= takenAt.at(-1)!.at - 1000);
    assert.ok(lastSecond.at(-1)!.taken - lastSecond[0]!.taken >= 64 * 1024, `the reader kept getting bytes: ${JSON.stringify(takenAt.slice(-12))}`);
    assert.ok(sent - taken <= announced, `the peer kept to the window: ${sent - taken} in flight`);
  },
);

// --- what waits for a reader that is behind (coalescer.ts) ---------------

const gc = exposedGc();

/** The JS heap and ArrayBuffer memory after a full GC. */
function heldMemory(): number {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

test('1-byte payloads behind a reader that does not read are pushed together: they cost about their bytes', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = new AgentSideConn(link, 13n, '10.0.0.5:10250', { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 * 1024 } });
  h.defer(() => conn.destroy());
  const count = 32 * 1024;
  // Each a view of a 64 KiB read of its own, as from HTTP/2.
  const reads = Array.from({ length: 16 }, (_, i) => Buffer.alloc(64 * 1024, i + 1));
  const expected = Buffer.alloc(count);
  for (let i = 0; i < count; i++) expected[i] = reads[i % 16]![i % 4096]!;
  conn.deliver(reads[0]!.subarray(0, 1));
  const before = heldMemory();
  for (let i = 1; i < count; i++) conn.deliver(reads[i % 16]!.subarray(i % 4096, (i % 4096) + 1));
  const held = heldMemory() - before;
  // One pushed chunk per payload, each a Buffer and an ArrayBuffer of its own, kept ~7 MB.
  assert.ok(held < 4 * count + 512 * 1024, `${count} waiting 1-byte payloads keep ${held} bytes`);
  assert.equal(conn.readableLength > 0, true);
  assert.equal(link.pauses, 0);
  const got = conn.read() as Buffer;
  assert.ok(got.equals(expected), 'every byte, in order');
  assert.equal(conn.read(), null);
});

/** Readers that stop and go at odd moments; each resolves with all it read up to the end. */
const readers: Record<string, (conn: PacketConn, rand: () => number) => Promise<Buffer>> = {
  "'data', paused and resumed": (conn, rand) => {
    const got: Buffer[] = [];
    conn.on('data', (c: Buffer) => {
      got.push(c);
      if (rand() < 0.1) {
        conn.pause();
        setTimeout(() => conn.resume(), Math.floor(rand() * 3));
      }
    });
    return once(conn, 'end').then(() => Buffer.concat(got));
  },
  'pipe() into a writer that is slow at times': async (conn, rand) => {
    const got: Buffer[] = [];
    const sink = new Writable({
      highWaterMark: 1024,
      write(chunk: Buffer, _enc, cb) {
        got.push(chunk);
        if (rand() < 0.2) setTimeout(cb, Math.floor(rand() * 3));
        else cb();
      },
    });
    await pipeline(conn, sink);
    return Buffer.concat(got);
  },
  "'readable' and read(n) of odd sizes": (conn, rand) => {
    const got: Buffer[] = [];
    const take = (): void => {
      for (;;) {
        const c = conn.read(1 + Math.floor(rand() * 5000));
        if (c === null) break;
        got.push(c);
      }
    };
    conn.on('readable', () => {
      if (rand() < 0.3) setTimeout(take, 1);
      else take();
    });
    return once(conn, 'end').then(() => Buffer.concat(got));
  },
  'async iteration with pauses': async (conn, rand) => {
    const got: Buffer[] = [];
    for await (const c of conn) {
      got.push(c as Buffer);
      if (rand() < 0.1) await new Promise((r) => setTimeout(r, 1));
    }
    return Buffer.concat(got);
  },
};

for (const [name, read] of Object.entries(readers)) {
  for (const flow of [false, true]) {
    test(`${name}${flow ? ', with flow control' : ''}: mixed small and large payloads arrive in order, then the end`, LIMIT, async (t) => {
      const h = harness(t);
      const rand = prng(name.length * (flow ? 2 : 1));
      const next = payloads(rand);
      const link = new RecordingLink();
      const conn = new AgentSideConn(link, 14n, '10.0.0.5:10250', flow ? { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 * 1024 } } : {});
      h.defer(() => conn.destroy());
      const all = read(conn, rand);
      const expected: Buffer[] = [];
      for (let step = 0; step < 300; step++) {
        const burst = Math.floor(rand() * 12);
        for (let i = 0; i < burst; i++) {
          const p = next();
          expected.push(p);
          conn.deliver(p);
        }
        if (rand() < 0.6) await tick();
      }
      conn.remoteClose();
      const got = await all;
      const want = Buffer.concat(expected);
      assert.equal(got.length, want.length);
      assert.ok(got.equals(want), 'the bytes in order');
    });
  }
}

test('with flow control, a peer that keeps to its window and sends 1-byte payloads to a reader that stops and goes is never stuck', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  // Held chunks (16 KiB) are the whole window: only a grant after the read that took one lets the peer go on.
  const announced = 16 * 1024;
  const conn = new AgentSideConn(link, 15n, '10.0.0.5:10250', { flow: { sendWindow: announced, receiveWindow: announced } });
  h.defer(() => conn.destroy());
  const rand = prng(7);
  let consumed = 0;
  let next = 0;
  let inOrder = true;
  conn.on('data', (c: Buffer) => {
    for (const b of c) inOrder &&= b === next++ % 251;
    consumed += c.length;
  });
  const granted = (): number => link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' ? Number(p.bytes) : 0), 0);
  const total = 512 * 1024;
  let sent = 0;
  const deadline = Date.now() + 5000;
  for (let round = 0; round < 100_000 && consumed < total && Date.now() < deadline; round++) {
    const r = rand();
    if (r < 0.2) conn.pause();
    else if (r < 0.6) conn.resume();
    const credit = Math.min(announced + granted() - sent, total - sent);
    for (let i = 0; i < credit; i++) conn.deliver(Buffer.from([sent++ % 251]));
    await tick();
  }
  assert.equal(consumed, total, `the reader got ${consumed} of ${total}, the peer was granted ${announced + granted()}`);
  assert.ok(inOrder);
  assert.equal(link.pauses, 0, 'the peer never went past its window');
});
