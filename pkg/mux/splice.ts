// Joins two duplex streams both ways (a socket and a tunnelled connection, or
// two sockets): whichever side ends, the whole pair ends; data already in
// flight is delivered first; an error on either side destroys both; nothing
// outlives the pair.

import type { Duplex } from 'node:stream';

/** How long a stream may take to flush its last bytes once the pair is over. */
const FLUSH_TIMEOUT_MS = 10_000;

export function splice(a: Duplex, b: Duplex, onClose?: (err: Error | undefined) => void): void {
  let firstError: Error | undefined;
  a.pipe(b);
  b.pipe(a);
  a.on('error', (err) => {
    firstError ??= err;
    b.destroy();
  });
  b.on('error', (err) => {
    firstError ??= err;
    a.destroy();
  });
  a.once('close', () => closePeer(a, b, firstError));
  b.once('close', () => closePeer(b, a, firstError));
  if (onClose !== undefined) {
    let pending = 2;
    const done = (): void => {
      if (--pending === 0) onClose(firstError);
    };
    a.once('close', done);
    b.once('close', done);
  }
}

/**
 * `closed` has closed. If it ended its input cleanly, pipe() has already
 * called peer.end(), and the peer may still be flushing (a tunnelled
 * connection waits for its congested link): it goes once that is done.
 * Any other close (an error, a reset, a local destroy) takes the peer down at once.
 */
function closePeer(closed: Duplex, peer: Duplex, firstError: Error | undefined): void {
  if (peer.destroyed) return;
  if (firstError !== undefined || !closed.readableEnded || peer.writableFinished) {
    peer.destroy();
    return;
  }
  peer.end();
  const timer = setTimeout(() => peer.destroy(), FLUSH_TIMEOUT_MS);
  timer.unref();
  peer.once('finish', () => peer.destroy());
  peer.once('close', () => clearTimeout(timer));
}
