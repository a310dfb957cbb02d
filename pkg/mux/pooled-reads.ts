// Reads of one socket into pooled slabs (buffer-pool.ts), through net's
// `onread` option: the socket emits no 'data'; each chunk goes to the sink
// (the socket relay), or waits until one is set. 'end', pause() and resume()
// behave as for any socket.
//
// A socket holds the buffer for its next read at all times, so it does not
// get a slab of its own unless it is streaming: after a read that filled at
// least half of what it read into, the next read goes to a slab (no copy:
// the chunk is a view of it). Otherwise it reads into one landing buffer
// shared by every socket, and the chunk is copied out at once (reads are
// synchronous, so no other socket can write there first): 1,000 idle
// connections hold no slab, and a small read pins no 64 KiB.
//
// Each chunk handed on holds one reference to its slab (if it has one),
// which the sink releases (releaseSlab) when done with it.

import type { Socket } from 'node:net';
import { type BufferPool, releaseSlab, SLAB_HEADROOM, SLAB_PAYLOAD, targetReadPool } from './buffer-pool.js';

/** The landing buffer of reads that did not get a slab (one per process). */
const landing = Buffer.allocUnsafeSlow(SLAB_PAYLOAD);

/** A read at least this large asks for a slab for the next one. */
const STREAMING_READ = SLAB_PAYLOAD / 2;

export class PooledReads {
  /** The `onread` option for net.connect(). */
  readonly onread: { buffer: () => Buffer; callback: (n: number, buf: Buffer) => boolean };
  private sink: ((chunk: Buffer) => void) | undefined;
  private early: Buffer[] = [];
  /** The slab view the socket reads into next, if not the landing buffer. */
  private next: Buffer | undefined;
  private streaming = false;
  private disposed = false;

  constructor(private readonly pool: BufferPool = targetReadPool) {
    this.onread = { buffer: this.nextBuffer, callback: this.onRead };
  }

  /** Releases the slab of the next read once `socket` has closed (it reads no more). */
  bind(socket: Socket): void {
    socket.once('close', this.dispose);
  }

  /** From now on chunks go to `sink`; those read before go first, in order. */
  deliverTo(sink: (chunk: Buffer) => void): void {
    this.sink = sink;
    const early = this.early;
    this.early = [];
    for (const chunk of early) sink(chunk);
  }

  /** Chunks read and not yet handed to a sink. */
  get pendingChunks(): number {
    return this.early.length;
  }

  private readonly nextBuffer = (): Buffer => {
    if (!this.streaming || this.disposed) return landing;
    this.next = this.pool.take().subarray(SLAB_HEADROOM);
    return this.next;
  };

  private readonly onRead = (n: number, buf: Buffer): boolean => {
    let chunk: Buffer;
    if (buf === this.next) {
      this.next = undefined;
      chunk = buf.subarray(0, n);
    } else if (n >= STREAMING_READ) {
      chunk = this.pool.take().subarray(SLAB_HEADROOM, SLAB_HEADROOM + n);
      buf.copy(chunk, 0, 0, n);
    } else {
      chunk = Buffer.allocUnsafe(n);
      buf.copy(chunk, 0, 0, n);
    }
    this.streaming = n >= STREAMING_READ;
    if (this.disposed) releaseSlab(chunk);
    else if (this.sink !== undefined) this.sink(chunk);
    else this.early.push(chunk);
    return true;
  };

  /**
   * The socket has closed: the slab it held for a next read, and chunks nobody
   * took, go back, and the sink goes (the socket's onread keeps this object,
   * and a closed socket can outlive scavenges: SocketRelay.detachFrom).
   */
  readonly dispose = (): void => {
    if (this.disposed) return;
    this.disposed = true;
    this.sink = undefined;
    if (this.next !== undefined) releaseSlab(this.next);
    this.next = undefined;
    for (const chunk of this.early) releaseSlab(chunk);
    this.early = [];
  };
}
