// Ending a stream because something failed, so that its other end can tell
// the failure from a finished stream: the abortive close.

import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';

/**
 * Closes `stream` abortively because of `err`; data not yet delivered is dropped.
 * - A TCP socket is reset (RST): the peer's next read fails with ECONNRESET
 *   instead of reaching EOF. One whose end (FIN) was already sent cannot be
 *   (libuv refuses to reset a socket shut down for writing): it is destroyed,
 *   which is no worse, as its peer already has all we were to send, and its
 *   further writes are answered with a reset by the kernel.
 * - A Unix socket has no reset: it is destroyed, and Linux reports
 *   ECONNRESET to the peer only if the peer had sent bytes that were not read
 *   yet; otherwise the peer sees EOF.
 * - A TLS socket is destroyed without close_notify (resetting the TCP socket
 *   beneath a live TLS session needs Node's internals, and crashed Node in
 *   trials); HTTP above it still shows a cut response by its framing.
 * - Anything else (a tunnelled connection) is destroyed with `err`, which it
 *   passes on to its peer (CLOSE_RSP or CLOSE_REQ carrying the error).
 */
export function abortStream(stream: Duplex, err: Error): void {
  if (stream.destroyed) return;
  if (stream instanceof Socket) {
    // A TCP socket knows its peer's port; a Unix socket has none.
    if (!(stream instanceof TLSSocket) && stream.remotePort !== undefined && !stream.writableEnded) stream.resetAndDestroy();
    else stream.destroy();
    return;
  }
  stream.destroy(err);
}
