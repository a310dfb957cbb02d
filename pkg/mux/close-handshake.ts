// The close handshake's two sides, and the timer that bounds a close the
// peer never finishes. Konnectivity has no half-close: when either side
// finishes, the whole connection ends, and each side owes the other one final
// packet. The server opens with CLOSE_REQ and waits for the agent's
// CLOSE_RSP; the agent answers (or opens) with CLOSE_RSP and waits for
// nothing. conn-core.ts decides when the final packet goes; a role says which.

import { ConnectionClosedError } from '../protocol/errors.js';
import type { KnownPacket } from '../protocol/packet.js';

/** Which final packet a side of a connection owes, and whether it awaits an answer. */
export interface CloseRole {
  /** True if, once our final packet is sent, no answer is awaited (the agent's side). */
  readonly endsWithFinalPacket: boolean;
  /**
   * The packet that tells the peer this side is done, or undefined if none is
   * owed. `answersPeer` is true when the peer ended first (or both directions
   * were ended by CLOSE_WRITEs): ours is the answer.
   */
  finalPacket(connectID: bigint, answersPeer: boolean, err: Error | null): KnownPacket | undefined;
}

/**
 * The agent's side: a CLOSE_RSP however the connection ends; when it failed
 * on our side (the target reset the connection), its error text says so, and
 * the server resets the caller.
 */
export const AGENT_CLOSE: CloseRole = {
  endsWithFinalPacket: true,
  finalPacket(connectID, answersPeer, err) {
    const error = err !== null && !answersPeer ? err.message || err.name : '';
    return { type: 'CLOSE_RSP', connectID, error };
  },
};

/** The server's side against an agent that does not read CLOSE_REQ's error: CLOSE_REQ, none when the agent ended first. */
export const SERVER_CLOSE: CloseRole = {
  endsWithFinalPacket: false,
  finalPacket(connectID, answersPeer) {
    return answersPeer ? undefined : { type: 'CLOSE_REQ', connectID };
  },
};

/**
 * The server's side against an agent that negotiated half-close and with it
 * reads CLOSE_REQ's error: a failure says so, and the target is reset rather
 * than closed.
 */
export const SERVER_CLOSE_WITH_ERROR: CloseRole = {
  endsWithFinalPacket: false,
  finalPacket(connectID, answersPeer, err) {
    if (answersPeer) return undefined;
    if (err !== null) return { type: 'CLOSE_REQ', connectID, error: err.message || err.name };
    return { type: 'CLOSE_REQ', connectID };
  },
};

/** The server's role towards an agent: whether it reads CLOSE_REQ's error (it negotiated half-close). */
export function serverClose(closeWithError: boolean): CloseRole {
  return closeWithError ? SERVER_CLOSE_WITH_ERROR : SERVER_CLOSE;
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
