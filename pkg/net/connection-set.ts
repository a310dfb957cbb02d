// The connections a server has open, raw sockets included while they still
// handshake: counted for floods and readiness, destroyed by close().

import type { Socket } from 'node:net';

export class ConnectionSet {
  private readonly sockets = new Set<Socket>();

  /** Tracks `socket` until it closes. */
  add(socket: Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
  }

  get size(): number {
    return this.sockets.size;
  }

  /** Destroys every connection still open. */
  destroyAll(): void {
    for (const socket of this.sockets) socket.destroy();
  }
}
