// The connections a server has open (sockets, raw ones included while they
// still handshake, or HTTP/2 sessions): counted for floods and readiness,
// destroyed by close(). A slot array with a free list rather than a Set: a
// connection comes and goes with every caller, and a long-lived Set replaces
// its hash table as they do, each replaced table promoted into the old
// generation (pkg/mux/id-map.ts).

import type { Socket } from 'node:net';
import { objectArray } from '../mux/object-array.js';

/** What ConnectionSet needs of a connection: a Socket or an Http2Session. */
export interface Closable {
  once(event: 'close', listener: () => void): unknown;
  destroy(): void;
}

/** Slots kept when the set empties (more are let go). */
const RETAINED_SLOTS = 64;

export class ConnectionSet<C extends Closable = Socket> {
  private readonly sockets: Array<C | undefined> = objectArray();
  /** Slots of `sockets` that are empty. */
  private readonly free: number[] = [];
  private count = 0;

  /** Tracks `socket` until it closes. */
  add(socket: C): void {
    const slot = this.free.length > 0 ? this.free.pop()! : this.sockets.push(undefined) - 1;
    this.sockets[slot] = socket;
    this.count++;
    socket.once('close', () => {
      this.sockets[slot] = undefined;
      this.free.push(slot);
      // Empty after a flood: let the slots go rather than keep the flood's size for the server's life.
      if (--this.count === 0 && this.sockets.length > RETAINED_SLOTS) {
        this.sockets.length = 0;
        this.free.length = 0;
      }
    });
  }

  get size(): number {
    return this.count;
  }

  /** Destroys every connection still open. */
  destroyAll(): void {
    for (const socket of this.sockets) socket?.destroy();
  }
}
