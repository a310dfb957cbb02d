// Ending a stream because something failed, so that its other end can tell
// the failure from a finished stream: the abortive close.

import { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';

/** TLS sessions and the connection each runs over (see abortsThrough). */
const transports = new WeakMap<Duplex, Duplex>();

/**
 * Records that the TLS session `session` runs over `transport` (the TCP
 * socket a TLS server accepted, or a tunnelled connection a TLS client runs
 * over), so that aborting the session aborts its transport. Node's TLS can
 * only close its transport, which would pass a failure on as a normal end (a
 * FIN, or a CLOSE_REQ without the error).
 */
export function abortsThrough(session: Duplex, transport: Duplex): void {
  transports.set(session, transport);
}

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
 * - A TLS session recorded with abortsThrough whose end was not begun: its
 *   transport is aborted first (a TCP socket reset beneath the session, a
 *   tunnelled connection told the error), then the session is destroyed
 *   without close_notify (Node 20's TLS closes a session whose TCP handle is
 *   already gone without touching it; test/e2e/cut-streams.test.ts does this
 *   200 times).
 * - Another TLS socket is destroyed without close_notify; HTTP above it
 *   still shows a cut response by its framing.
 * - Anything else (a tunnelled connection) is destroyed with `err`, which it
 *   passes on to its peer (CLOSE_RSP or CLOSE_REQ carrying the error).
 */
export function abortStream(stream: Duplex, err: Error): void {
  if (stream.destroyed) return;
  const transport = transports.get(stream);
  if (transport !== undefined && !stream.writableEnded) {
    abortStream(transport, err);
    stream.destroy();
    return;
  }
  if (stream instanceof Socket) {
    // A TCP socket knows its peer's port; a Unix socket has none.
    if (!(stream instanceof TLSSocket) && stream.remotePort !== undefined && !stream.writableEnded) stream.resetAndDestroy();
    else stream.destroy();
    return;
  }
  stream.destroy(err);
}
