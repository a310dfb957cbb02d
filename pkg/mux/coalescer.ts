// Small payloads that have to wait (for a socket that has not written what it
// holds, for a reader that is behind), copied together into chunks of their
// own. Queued one by one, each would cost a queue entry, a Buffer and an
// ArrayBuffer, ~260 bytes of heap whatever its size, while the queue is
// bounded by the bytes it counts (windows, high-water marks): a window of
// 1-byte DATA, tens of megabytes per reader that does not read (issue 33).
// Copied together, what waits costs about its bytes. A view that keeps much
// more memory than its bytes (a small part of a 64 KiB read) is copied too,
// whatever its size, so that it does not keep that read (holdable).
//
// The holder hands a chunk on (writes it, pushes it) when it is full, when
// the socket or the reader takes more, and before a payload that is not
// copied, or the end: bytes keep their order.

import { holdable, MAX_HELD_PER_BYTE } from './buffer-pool.js';

/** Payloads below this many bytes are copied together when they wait; larger ones wait as themselves. */
export const COALESCE_BELOW = 4 * 1024;
/** The size of a chunk, allocated when the first payload has to wait. */
export const COALESCE_CHUNK = 16 * 1024;

export class Coalescer {
  private chunk: Buffer | undefined;
  private used = 0;

  /** Bytes held. */
  get length(): number {
    return this.used;
  }

  /** Whether `data`, if it has to wait, is copied in here rather than kept as itself. */
  static takes(data: Buffer): boolean {
    return data.length < COALESCE_BELOW || data.length * MAX_HELD_PER_BYTE < data.buffer.byteLength;
  }

  /**
   * Copies `data` in after what is held. If it does not fit, what was held is
   * returned, to be handed on before anything else, and `data` starts a new chunk.
   */
  add(data: Buffer): Buffer | undefined {
    let full: Buffer | undefined;
    if (this.chunk !== undefined && this.used + data.length > this.chunk.length) full = this.take();
    // Memory of its own: a chunk from Node's shared pool would keep the pool's other users' bytes.
    this.chunk ??= Buffer.allocUnsafeSlow(Math.max(COALESCE_CHUNK, data.length));
    data.copy(this.chunk, this.used);
    this.used += data.length;
    return full;
  }

  /**
   * What is held, as one buffer, and the holder starts afresh; undefined if
   * nothing is held. A chunk handed on mostly empty is copied down to its
   * bytes (holdable): it may wait as long as a full one.
   */
  take(): Buffer | undefined {
    const chunk = this.chunk;
    if (chunk === undefined) return undefined;
    const used = this.used;
    this.chunk = undefined;
    this.used = 0;
    return used === 0 ? undefined : holdable(chunk.subarray(0, used));
  }

  /** Forgets what is held (the connection is over). */
  clear(): void {
    this.chunk = undefined;
    this.used = 0;
  }
}
