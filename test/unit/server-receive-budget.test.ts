// What the server's receive path allocates, counted, never timed, and that
// the slabs it joins messages into all come back. 64 KiB DATA messages reach
// the server's packet call (pkg/grpc/packet-stream.ts) from a real agent call
// over real node:http2 sessions (test/support/memory-link.ts), always in
// pieces of at most 16 KiB (HTTP/2 frames), and go on to a TunnelRelay joined
// to a loopback socket, as an HTTP CONNECT caller's. Each message is joined
// into a pooled slab: once the pool is warm, a MiB received costs no new
// buffer; a change that brings back a Buffer per join (16 per MiB) fails
// here. The pool poisons what comes back and the caller checks every byte, so
// a slab released while a socket write still holds it shows as corrupt data.
// (The CPU and the GC it saves were measured with bench/profile.ts bulk, a
// one-off tool since removed: it is in git.)

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { BufferPool, isPooled, releaseSlab, SLAB_HEADROOM, SLAB_PAYLOAD } from '../../pkg/mux/buffer-pool.js';
import { ConnectionClosedError } from '../../pkg/protocol/errors.js';
import { TunnelRelay } from '../../pkg/tunnel/tunnel-relay.js';
import { countBufferAllocations } from '../support/buffer-allocations.js';
import { harness, type Harness } from '../support/harness.js';
import { memoryLinkPair, sendWithBackPressure, type MemoryLinkPair } from '../support/memory-link.js';

const MiB = 1024 * 1024;
const CONNECT_ID = 5n;
/** Packets delivered before the relay's socket is attached (they wait in its early queue). */
const EARLY = 3;

/** A pooled 64 KiB payload holding a pattern, as the agent's target reads leave it (the sender's pool, not the one under test). */
function patternPayload(): Buffer {
  const payload = new BufferPool({ poison: false }).take().subarray(SLAB_HEADROOM, SLAB_HEADROOM + SLAB_PAYLOAD);
  for (let i = 0; i < payload.length; i++) payload[i] = (i * 31 + 7) & 0xff;
  return payload;
}

/** Both ends of a loopback TCP connection: `near` is joined to the relay, `caller` reads what the tunnel delivers. */
async function socketPair(h: Harness): Promise<{ near: Socket; caller: Socket }> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(() => new Promise<void>((r) => server.close(() => r())));
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const near = connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port });
  const [caller] = await accepted;
  await once(near, 'connect');
  caller.on('error', () => {});
  h.defer(() => {
    near.destroy();
    caller.destroy();
  });
  return { near, caller };
}

interface Transfer {
  pair: MemoryLinkPair;
  relay: TunnelRelay;
  caller: Socket;
  /** Resolves when the caller has received `bytes`, having checked every byte. */
  received(bytes: number): Promise<void>;
  /** Resolves when the server has handled `count` DATA packets. */
  handled(count: number): Promise<void>;
  /** Backing stores of the payloads handed to the relay that were not pooled slabs. */
  foreign: Set<ArrayBufferLike>;
}

/** A link whose server joins into `pool`, a relay fed by it, and `count` 64 KiB DATA packets on their way. */
async function transfer(
  h: Harness,
  pool: BufferPool,
  payload: Buffer,
  count: number,
  afterPacket?: (handled: number, pair: MemoryLinkPair, relay: TunnelRelay) => void,
): Promise<Transfer> {
  const pair = await memoryLinkPair({ server: { joinPool: pool } });
  h.defer(() => pair.close());
  const { near, caller } = await socketPair(h);
  const relay = new TunnelRelay({ agentID: 'node-a', link: pair.server, halfClose: false }, CONNECT_ID, '127.0.0.1:10250');
  h.defer(() => relay.destroy());
  const foreign = new Set<ArrayBufferLike>();
  let packets = 0;
  const packetWaiters: Array<[number, () => void]> = [];
  pair.onServerPacket((p) => {
    if (p.type !== 'DATA' || p.connectID !== CONNECT_ID) return;
    if (!isPooled(p.data)) foreign.add(p.data.buffer);
    relay.deliver(p.data);
    if (++packets === EARLY) relay.attach(near);
    afterPacket?.(packets, pair, relay);
    for (const [n, resolve] of packetWaiters) if (packets === n) resolve();
  });
  let got = 0;
  let corruptAt = -1;
  const byteWaiters: Array<[number, () => void, (err: Error) => void]> = [];
  caller.on('data', (chunk: Buffer) => {
    // Compared with the payload in runs: stream offset o holds payload[o % SLAB_PAYLOAD].
    for (let at = 0; at < chunk.length && corruptAt < 0;) {
      const offset = (got + at) % SLAB_PAYLOAD;
      const n = Math.min(chunk.length - at, SLAB_PAYLOAD - offset);
      if (!chunk.subarray(at, at + n).equals(payload.subarray(offset, offset + n))) corruptAt = got + at;
      at += n;
    }
    got += chunk.length;
    for (const [n, resolve, reject] of byteWaiters) {
      if (corruptAt >= 0) reject(new Error(`the caller received corrupt bytes from offset ${corruptAt} (a slab released while still being written?)`));
      else if (got >= n) resolve();
    }
  });
  sendWithBackPressure(pair.agent, CONNECT_ID, payload, count);
  return {
    pair,
    relay,
    caller,
    foreign,
    received: (bytes) => new Promise((resolve, reject) => byteWaiters.push([bytes, resolve, reject])),
    handled: (n) => new Promise((resolve) => packetWaiters.push([n, resolve])),
  };
}

/** Waits, a bounded number of turns of the loop, for every slab of `pool` to be back (write callbacks come a few turns after the bytes). */
async function allBack(pool: BufferPool): Promise<void> {
  for (let i = 0; i < 10_000 && pool.outstanding > 0; i++) await new Promise((r) => setImmediate(r));
  assert.equal(pool.outstanding, 0, `${pool.outstanding} slabs never came back to the pool`);
}

test('64 KiB DATA received by the server is joined into pooled slabs: no new buffer per message once the pool is warm', async (t) => {
  const h = harness(t);
  const pool = new BufferPool({ poison: true, framingRoom: false });
  const payload = patternPayload();
  // Warms the pool (and V8) on a first transfer. The pool grows to the most
  // slabs out at once: a stream resumed after its socket drained hands on what
  // HTTP/2 buffered meanwhile in one go, and each slab waits for its socket
  // write's callback (the next tick), so a few dozen at times.
  const warm = await transfer(h, pool, payload, 256);
  await warm.received(256 * SLAB_PAYLOAD);
  const SIZE = 32 * MiB;
  const count = SIZE / SLAB_PAYLOAD;
  let foreign = 0;
  let slabsAllocated = 0;
  const allocations = await countBufferAllocations(async () => {
    const allocated0 = pool.allocated;
    const run = await transfer(h, pool, payload, count);
    await run.received(SIZE);
    foreign = run.foreign.size;
    slabsAllocated = pool.allocated - allocated0;
  });
  const perMiB = (n: number): number => n / (SIZE / MiB);
  assert.ok(perMiB(foreign) <= 0.25, `${perMiB(foreign)} payloads per MiB reached the relay in buffers not from the pool (budget 0.25)`);
  assert.ok(perMiB(slabsAllocated) <= 1, `${perMiB(slabsAllocated)} slabs per MiB allocated anew on a warm pool (budget 1)`);
  // The sender's payload is pooled too (its framing goes in the slab's room): nothing per packet on either side.
  // Budget 2, not 1: under a full CI run the pool sometimes grows a little more (1.125 seen once); a Buffer per
  // join, the regression this guards against, is 16.
  assert.ok(perMiB(allocations) <= 2, `${perMiB(allocations)} Buffer allocations per MiB (budget 2; a Buffer per join is 16)`);
});

test('every slab comes back after a transfer, including those that waited for the socket', async (t) => {
  const h = harness(t);
  const pool = new BufferPool({ poison: true, framingRoom: false });
  const run = await transfer(h, pool, patternPayload(), 256);
  await run.received(256 * SLAB_PAYLOAD);
  await allBack(pool);
  assert.ok(pool.allocated > 0, 'the messages were joined into slabs of this pool');
});

test('every slab comes back when the caller closes in the middle of a transfer', async (t) => {
  const h = harness(t);
  const pool = new BufferPool({ poison: true, framingRoom: false });
  const count = 256;
  const run = await transfer(h, pool, patternPayload(), count);
  const closed = new Promise<Error | undefined>((resolve) => (run.relay.onClose = resolve));
  await run.received(4 * MiB);
  // A reset: the relay's socket fails with writes still queued on it.
  run.caller.resetAndDestroy();
  assert.ok((await closed) instanceof Error, 'the relay failed with its socket');
  // What the agent still sends reaches a closed relay, which drops it.
  await run.handled(count);
  await allBack(pool);
});

test('every slab comes back when the link is destroyed in the middle of a transfer', async (t) => {
  const h = harness(t);
  const pool = new BufferPool({ poison: true, framingRoom: false });
  let cut = false;
  const run = await transfer(h, pool, patternPayload(), 256, (handled, pair, relay) => {
    // While a packet of a chunk that ended in the middle of the next message is handled
    // (more joins begun than messages handled: every 64 KiB message spans chunks).
    if (cut || handled < 64 || pair.server.joined.messages <= handled) return;
    cut = true;
    // The server's transport dies (as an agent's TCP connection does): what HTTP/2 had not delivered is lost.
    pair.serverTransport.destroy();
    relay.remoteClose(new ConnectionClosedError('agent node-a disconnected: test'));
  });
  const closed = new Promise<Error | undefined>((resolve) => (run.relay.onClose = resolve));
  await closed;
  assert.ok(cut, 'the link was cut with a message half joined');
  await allBack(pool);
});

test('a relay that ends before its socket is attached gives back the slabs that waited', () => {
  const pool = new BufferPool({ poison: true, framingRoom: false });
  const sent: unknown[] = [];
  const link = { sendData: () => {}, sendControl: (p: unknown) => sent.push(p) > 0, pauseReceive: () => {}, resumeReceive: () => {} };
  const relay = new TunnelRelay({ agentID: 'node-a', link, halfClose: false }, CONNECT_ID, '127.0.0.1:10250');
  for (let i = 0; i < 3; i++) {
    // Bulk payloads: a small one would be copied out of its slab (holdable), holding none.
    const data = pool.take().subarray(0, SLAB_PAYLOAD / 2);
    relay.deliver(data);
    // The link's hold ends once the packet is handled.
    releaseSlab(data);
  }
  const small = pool.take().subarray(0, 1000);
  relay.deliver(small);
  releaseSlab(small);
  assert.equal(pool.outstanding, 3, 'the relay holds the bulk payloads that wait for its socket, and a copy of the small one');
  relay.destroy();
  assert.equal(pool.outstanding, 0);
  assert.equal(sent.length, 1, 'the agent was told (CLOSE_REQ)');
});
