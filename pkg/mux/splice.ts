// Joins two duplex streams both ways (a socket and a tunnelled connection, or
// two sockets): whichever side ends, the whole pair ends; data already in
// flight is delivered first; nothing outlives the pair.
//
// How a side ends is passed on. A clean end (EOF) ends the other side once it
// has flushed. A failure (an error, or a close without EOF: a reset, a local
// destroy, a dropped link) is an abortive close of the other side
// (abortStream): a socket is reset, a tunnelled connection tells its peer the
// error, so that a cut stream never looks like a finished one.

import type { Duplex } from 'node:stream';
import { ConnectionClosedError } from '../protocol/errors.js';
import { abortStream } from './abort.js';

/** How long a stream may take to flush its last bytes once the pair is over. */
const FLUSH_TIMEOUT_MS = 10_000;

export function splice(a: Duplex, b: Duplex, onClose?: (err: Error | undefined) => void): void {
  let firstError: Error | undefined;
  a.pipe(b);
  b.pipe(a);
  a.on('error', (err) => {
    firstError ??= err;
    abortStream(b, err);
  });
  b.on('error', (err) => {
    firstError ??= err;
    abortStream(a, err);
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
 * Any other close (an error, a reset, a local destroy) aborts the peer.
 */
function closePeer(closed: Duplex, peer: Duplex, firstError: Error | undefined): void {
  if (peer.destroyed) return;
  if (firstError !== undefined || !closed.readableEnded) {
    abortStream(peer, firstError ?? new ConnectionClosedError('the other side of the connection closed before its end'));
    return;
  }
  if (peer.writableFinished) {
    peer.destroy();
    return;
  }
  peer.end();
  const timer = setTimeout(() => abortStream(peer, new ConnectionClosedError(`the last bytes were not taken within ${FLUSH_TIMEOUT_MS} ms`)), FLUSH_TIMEOUT_MS);
  timer.unref();
  peer.once('finish', () => peer.destroy());
  peer.once('close', () => clearTimeout(timer));
}
