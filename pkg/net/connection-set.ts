// The connections a server has open (sockets, raw ones included while they
// still handshake, or HTTP/2 sessions): counted for floods and readiness,
// destroyed by close().

import type { Socket } from 'node:net';

/** What ConnectionSet needs of a connection: a Socket or an Http2Session. */
export interface Closable {
  once(event: 'close', listener: () => void): unknown;
  destroy(): void;
}

export class ConnectionSet<C extends Closable = Socket> {
  private readonly open = new Set<C>();

  /** Tracks `socket` until it closes. */
  add(socket: C): void {
    this.open.add(socket);
    socket.once('close', () => this.open.delete(socket));
  }

  get size(): number {
    return this.open.size;
  }

  /** Destroys every connection still open. */
  destroyAll(): void {
    for (const socket of [...this.open]) socket.destroy();
  }
}
