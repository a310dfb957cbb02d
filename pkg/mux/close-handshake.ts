// The two pieces of the close handshake that every tunnelled connection shape
// (PacketConn, SocketRelay) shares: whether our final packet answers the
// peer's end, and the timer that bounds a close the peer never finishes.

import { ConnectionClosedError } from '../protocol/errors.js';

/**
 * True when our final packet answers the peer rather than opening the close:
 * the peer ended first, or, ending cleanly, both directions were already
 * ended by CLOSE_WRITEs (the peer has finished as much as we have).
 * `remoteEnded`: the peer ended the connection; `peerWriteEnded`: its
 * CLOSE_WRITE arrived; `writeEndSent`: we sent ours.
 */
export function answersPeer(remoteEnded: boolean, peerWriteEnded: boolean, writeEndSent: boolean, err: Error | null): boolean {
  return remoteEnded || (err === null && peerWriteEnded && writeEndSent);
}

/**
 * Starts the bound on a close the peer (or a local reader) never finishes:
 * after `ms`, `expire` gets a ConnectionClosedError. While `linkSuspended()`
 * (session resume) the peer cannot answer, so the timer waits another round.
 */
export function armCloseTimer(connectID: bigint, ms: number, linkSuspended: () => boolean, expire: (err: ConnectionClosedError) => void): NodeJS.Timeout {
  const timer = setTimeout(() => {
    if (linkSuspended()) {
      timer.refresh();
      return;
    }
    expire(new ConnectionClosedError(`connection ${connectID} did not finish closing within ${ms} ms; dropped`));
  }, ms);
  timer.unref();
  return timer;
}
