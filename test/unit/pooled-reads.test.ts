// Reads of a real loopback socket into pooled slabs (pkg/mux/pooled-reads.ts):
// every byte arrives, in order; a streaming socket reads into slabs without a
// new buffer per read; an idle or slow one holds none; chunks read before a
// sink is set wait for it; 'end' and pause/resume work as for any socket.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { setImmediate as immediate } from 'node:timers/promises';
import { BufferPool, isPooled, releaseSlab } from '../../pkg/mux/buffer-pool.js';
import { PooledReads } from '../../pkg/mux/pooled-reads.js';
import { exposedGc } from '../support/gc.js';

const MiB = 1024 * 1024;

/** A loopback server that runs `serve` on its one connection, and a client socket reading through `reads`. */
async function pooledClient(reads: PooledReads, serve: (s: Socket) => void): Promise<{ socket: Socket; close: () => Promise<void> }> {
  const server = createServer(serve);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const socket = connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, allowHalfOpen: true, onread: reads.onread });
  reads.bind(socket);
  await once(socket, 'connect');
  return {
    socket,
    close: async () => {
      socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

function pattern(n: number): Buffer {
  const b = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + (i >> 11)) & 0xff;
  return b;
}

test('a streaming socket reads 16 MiB into recycled slabs, every byte in order, then its end', async (t) => {
  const pool = new BufferPool({ poison: true, maxFree: 8 });
  const reads = new PooledReads(pool);
  const sent = pattern(16 * MiB);
  const c = await pooledClient(reads, (s) => s.end(sent));
  t.after(c.close);
  const hash = createHash('sha256');
  let chunks = 0;
  let pooled = 0;
  reads.deliverTo((chunk) => {
    chunks++;
    if (isPooled(chunk)) pooled++;
    hash.update(chunk);
    // The sink is done with it (a relay whose link wrote it).
    releaseSlab(chunk);
  });
  c.socket.resume();
  await once(c.socket, 'end');
  assert.equal(hash.digest('hex'), createHash('sha256').update(sent).digest('hex'));
  assert.ok(pooled >= chunks / 2, `${pooled} of ${chunks} chunks in slabs`);
  // Reused, not allocated per read: the pool never grew past what was held at once.
  assert.ok(pool.allocated <= 4, `${pool.allocated} slabs allocated for ${chunks} reads`);
  c.socket.destroy();
  await once(c.socket, 'close');
  assert.equal(pool.outstanding, 0, 'the slab held for the next read went back when the socket closed');
});

test('an idle socket after a small read holds no slab; chunks read before the sink is set wait for it', async (t) => {
  const pool = new BufferPool({ poison: true });
  const reads = new PooledReads(pool);
  const c = await pooledClient(reads, (s) => s.write('hello'));
  t.after(c.close);
  c.socket.resume();
  while (reads.pendingChunks === 0) await new Promise((r) => setImmediate(r));
  const got: Buffer[] = [];
  reads.deliverTo((chunk) => got.push(chunk));
  assert.equal(Buffer.concat(got).toString(), 'hello');
  assert.ok(!isPooled(got[0]!), 'a small read is copied out of the landing buffer');
  assert.equal(pool.outstanding, 0, 'no slab held by an idle socket');
});

test('pause() stops the reads and resume() goes on, with every byte', async (t) => {
  const pool = new BufferPool({ poison: true });
  const reads = new PooledReads(pool);
  const sent = pattern(4 * MiB);
  const c = await pooledClient(reads, (s) => s.end(sent));
  t.after(c.close);
  const hash = createHash('sha256');
  let paused = false;
  let readWhilePaused = 0;
  reads.deliverTo((chunk) => {
    if (paused) readWhilePaused++;
    hash.update(chunk);
    releaseSlab(chunk);
    if (!paused && readWhilePaused === 0) {
      paused = true;
      c.socket.pause();
      // Resumed after the event loop polled the socket again (a read then would have come here).
      setImmediate(() => {
        paused = false;
        c.socket.resume();
      });
    }
  });
  c.socket.resume();
  await once(c.socket, 'end');
  assert.equal(readWhilePaused, 0, 'nothing read while paused');
  assert.equal(hash.digest('hex'), createHash('sha256').update(sent).digest('hex'));
});

test('once its socket has closed, the reads no longer hold their sink (nor what the sink holds)', async () => {
  const gc = exposedGc();
  const reads = new PooledReads(new BufferPool({ poison: false }));
  let received = 0;
  const made = (): WeakRef<object> => {
    const connection = { received: 0 };
    reads.deliverTo((chunk) => (received += connection.received += chunk.length));
    return new WeakRef(connection);
  };
  const connection = made();
  const { socket, close } = await pooledClient(reads, (s) => s.end('bye'));
  const closed = once(socket, 'close');
  await once(socket, 'end');
  await close();
  await closed;
  assert.equal(received, 3);
  gc();
  await immediate();
  gc();
  // `reads` is still reachable (the socket's onread keeps it, and so does this test).
  assert.equal(reads.pendingChunks, 0);
  assert.equal(connection.deref(), undefined, 'the sink and its connection were collected');
});
