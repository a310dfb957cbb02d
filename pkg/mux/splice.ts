// Joins a socket and a tunnelled connection both ways, with the protocol's
// close semantics: whichever side ends, the whole connection ends, data
// already in flight is delivered first, an error on either side destroys both,
// and nothing outlives the pair.

import type { Socket } from 'node:net';
import type { PacketConn } from './packet-conn.js';

/** How long a socket may take to flush its last bytes once the connection is over. */
const FLUSH_TIMEOUT_MS = 10_000;

export function splice(socket: Socket, conn: PacketConn, onClose?: (err: Error | undefined) => void): void {
  let firstError: Error | undefined;
  socket.pipe(conn);
  conn.pipe(socket);

  socket.on('error', (err) => {
    firstError ??= err;
    conn.destroy();
  });
  conn.on('error', (err) => {
    firstError ??= err;
    socket.destroy();
  });
  socket.once('close', () => {
    // After a clean end of input, pipe() has called conn.end(), which may still
    // be flushing what it buffered for a congested link: destroying it now
    // would drop those bytes, so it goes once that is done. (Nothing reads its
    // other side any more.) A socket that closed without finishing its input
    // (an error, a reset, a local destroy) takes the connection down at once.
    if (!socket.readableEnded || conn.writableFinished) conn.destroy();
    else conn.once('finish', () => conn.destroy());
  });
  conn.once('close', () => {
    if (socket.destroyed) return;
    if (firstError !== undefined || socket.writableFinished) {
      socket.destroy();
      return;
    }
    // The connection ended cleanly: let the socket flush what conn.pipe() gave it, then close.
    socket.end();
    const timer = setTimeout(() => socket.destroy(), FLUSH_TIMEOUT_MS);
    timer.unref();
    socket.once('finish', () => socket.destroy());
    socket.once('close', () => clearTimeout(timer));
  });
  if (onClose !== undefined) {
    let pending = 2;
    const done = (): void => {
      if (--pending === 0) onClose(firstError);
    };
    socket.once('close', done);
    conn.once('close', done);
  }
}
