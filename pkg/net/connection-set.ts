// The connections a server has open, raw sockets included while they still
// handshake: counted for floods and readiness, destroyed by close(). A slot
// array with a free list rather than a Set: a socket comes and goes with every
// connection, and a long-lived Set replaces its hash table as they do, each
// replaced table promoted into the old generation (pkg/mux/id-map.ts).

import type { Socket } from 'node:net';
import { objectArray } from '../mux/object-array.js';

export class ConnectionSet {
  private readonly sockets: Array<Socket | undefined> = objectArray();
  /** Slots of `sockets` that are empty. */
  private readonly free: number[] = [];
  private count = 0;

  /** Tracks `socket` until it closes. */
  add(socket: Socket): void {
    const slot = this.free.length > 0 ? this.free.pop()! : this.sockets.push(undefined) - 1;
    this.sockets[slot] = socket;
    this.count++;
    socket.once('close', () => {
      this.sockets[slot] = undefined;
      this.free.push(slot);
      this.count--;
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
