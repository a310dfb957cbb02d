// What the link hands a socket, written at once to an idle socket, or, behind
// bytes the socket has not written yet, copied together with the other small
// payloads that wait (coalescer.ts) and written as one chunk: when the socket
// has written what it had (its 'drain', or the callback of the last write of
// what was held), when the chunk is full, or before a payload that is not
// copied or the end. Only the writes of held chunks take a callback: on an
// idle socket, one makes Node schedule a tick per write.

import type { Socket } from 'node:net';
import { retainSlab, writeHolding } from './buffer-pool.js';
import { Coalescer } from './coalescer.js';

export class HeldWrites extends Coalescer {
  /** Writes of what was held that the socket has not called back: the last one's callback writes what is held since. */
  private writesOut = 0;

  /** `drained` runs when the last write of held bytes calls back (the socket wrote all before it), as on 'drain'. */
  constructor(private readonly drained: () => void) {
    super();
  }

  /** Writes `data`, or holds it; false once what waits is over the socket's mark, as write() says. */
  write(socket: Socket, data: Buffer): boolean {
    let ok: boolean;
    if (this.length === 0 && socket.writableLength === 0) {
      ok = writeHolding(socket, data);
    } else if (Coalescer.takes(data)) {
      const full = this.add(data);
      ok = full === undefined || this.writeChunk(socket, full);
      // With no callback and no 'drain' to come, what is held goes now, and its callback writes what follows.
      if (this.writesOut === 0 && !socket.writableNeedDrain) ok = this.flush(socket) && ok;
    } else {
      ok = this.flush(socket);
      ok = writeHolding(socket, data) && ok;
    }
    return ok && socket.writableLength + this.length < socket.writableHighWaterMark;
  }

  /** Writes what is held, if anything; false if the socket is then over its mark. */
  flush(socket: Socket): boolean {
    const chunk = this.take();
    return chunk === undefined || this.writeChunk(socket, chunk);
  }

  /**
   * Before the socket is attached, everything waits in `early`: small
   * payloads copied together, others as they are.
   */
  holdEarly(data: Buffer, early: Buffer[]): void {
    if (Coalescer.takes(data)) {
      const full = this.add(data);
      if (full !== undefined) early.push(full);
      return;
    }
    const before = this.take();
    if (before !== undefined) early.push(before);
    // A view of a pooled slab (a joined message) is the link's only while its packet is handled.
    retainSlab(data);
    early.push(data);
  }

  private writeChunk(socket: Socket, chunk: Buffer): boolean {
    this.writesOut++;
    return socket.write(chunk, this.onWritten);
  }

  private readonly onWritten = (): void => {
    if (--this.writesOut === 0) this.drained();
  };
}
