// The half of a tunnelled connection that faces the peer, whatever is at our
// end (a Duplex for callers in this process, packet-conn.ts; a socket,
// socket-relay.ts): its states, the close handshake, flow control's credit
// and window, holding the shared link for a full reader (with the stall
// limit), the linger after our end. Each is implemented here once; the owner
// moves bytes between its end and the link and asks the core what may happen.
//
// The connection's state is two small state machines that only move forward,
// one per side (like ws's numbered receiver states):
//
//   peer:  OPEN ─CLOSE_WRITE─► WRITE_ENDED ─CLOSE_REQ/CLOSE_RSP─► ENDED
//          OPEN ──────────────CLOSE_REQ/CLOSE_RSP────────────────► ENDED
//   local: OPEN ─our end─► WRITE_ENDED (half-close) or LINGERING (upstream peer)
//          any ─our final packet─► FINAL_SENT ─over─► CLOSED
//
// Every change goes through toPeer/toLocal.

import { ConnectionStalledError } from '../protocol/errors.js';
import type { FlowWindows } from '../protocol/flow-control.js';
import type { KnownPacket } from '../protocol/packet.js';
import { ReceiveWindow } from '../protocol/receive-window.js';
import { armCloseTimer, type CloseRole } from './close-handshake.js';
import type { PacketLink } from './packet-link.js';

/** What the peer does, in the order it can happen. */
export const enum PeerState {
  /** The peer may send. */
  OPEN = 0,
  /** Its CLOSE_WRITE came (half-close): it sends no more, and still reads. */
  WRITE_ENDED = 1,
  /** It ended the connection (its final packet, or ours, which awaits no answer): nothing more arrives. */
  ENDED = 2,
}

/** What we do, in the order it can happen. */
export const enum LocalState {
  /** We may send. */
  OPEN = 0,
  /** Our end came and we sent CLOSE_WRITE: we send no more, and still read. */
  WRITE_ENDED = 1,
  /** Our end came and the peer cannot half-close: we read its answer until it closes or goes quiet. */
  LINGERING = 2,
  /** Our final packet went out (or none was owed): nothing more goes to the peer. */
  FINAL_SENT = 3,
  /** The connection is over: timers cleared, the link released. */
  CLOSED = 4,
}

/** What a core asks of the connection it serves. */
export interface CoreOwner {
  /** Bytes received that our end has not taken yet (for the stall error). */
  readonly waitingBytes: number;
  /** Ends the connection at once; with `err`, as a failure (the abortive close). */
  destroy(err?: Error): unknown;
}

export interface ConnCoreOptions {
  /** How long to wait for the peer to finish closing before giving up. Default 10 s. */
  closeTimeoutMs?: number;
  /** Per-connection flow control, when the link negotiated it. */
  flow?: FlowWindows;
  /**
   * Half-close, when the link negotiated it: our end sends CLOSE_WRITE and we
   * keep reading; the peer's CLOSE_WRITE ends our reading and we keep
   * writing. The connection closes once both directions are done.
   */
  halfClose?: boolean;
  /**
   * Without half-close: once our side has ended, keep reading what the peer
   * still sends (the answer to what we sent) until the peer closes or nothing
   * arrives for this long. Unset: our end closes the connection at once.
   */
  lingerAfterEndMs?: number;
  /**
   * Without flow control a full connection pauses the whole link (as
   * Konnectivity does); if its reader has not drained it within this long,
   * the connection is closed (ConnectionStalledError) so the link's other
   * connections and new dials keep flowing. Unset: no limit.
   */
  stallTimeoutMs?: number;
}

export class ConnCore {
  peer = PeerState.OPEN;
  local = LocalState.OPEN;
  /** Bytes we may still send before the peer grants more (Infinity without flow control). */
  sendCredit: number;
  /** What the peer may send: starts at flow.receiveWindow, sized to how fast our end takes it. */
  readonly window: ReceiveWindow | undefined;
  readonly halfClose: boolean;
  private readonly lingerAfterEndMs: number | undefined;
  private readonly stallTimeoutMs: number | undefined;
  private readonly closeTimeoutMs: number;
  private holdingLink = false;
  private closeTimer: NodeJS.Timeout | undefined;
  private lingerTimer: NodeJS.Timeout | undefined;
  private stallTimer: NodeJS.Timeout | undefined;

  constructor(
    readonly link: PacketLink,
    readonly connectID: bigint,
    private readonly role: CloseRole,
    private readonly owner: CoreOwner,
    opts: ConnCoreOptions,
  ) {
    const flow = opts.flow;
    this.halfClose = opts.halfClose === true;
    this.lingerAfterEndMs = this.halfClose ? undefined : opts.lingerAfterEndMs;
    this.stallTimeoutMs = flow === undefined ? opts.stallTimeoutMs : undefined;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 10_000;
    this.sendCredit = flow?.sendWindow ?? Infinity;
    this.window = flow !== undefined ? new ReceiveWindow(flow.receiveWindow, flow.roundTripMs) : undefined;
  }

  private toPeer(state: PeerState): void {
    if (state > this.peer) this.peer = state;
  }

  private toLocal(state: LocalState): void {
    if (state > this.local) this.local = state;
  }

  /** True once nothing more goes to the peer: it ended, or we sent our final packet. */
  get sendsNoMore(): boolean {
    return this.peer === PeerState.ENDED || this.local >= LocalState.FINAL_SENT;
  }

  /** True once the connection is over. */
  get closed(): boolean {
    return this.local === LocalState.CLOSED;
  }

  /** The link's transport is gone for now and may come back (session resume): waiting on the peer is no failure yet. */
  get linkSuspended(): boolean {
    return this.link.suspended === true;
  }

  // ------------------------------------------------------------ the peer's packets

  /** A DATA packet arrived that our end will take: the linger (if any) starts over. */
  received(): void {
    if (this.lingerTimer !== undefined) this.lingerTimer.refresh();
  }

  /** WINDOW_UPDATE: true if the credit grew (the owner sends what waited for it). */
  grantCredit(bytes: number): boolean {
    if (this.window === undefined || !(bytes > 0)) return false;
    this.sendCredit += bytes;
    return true;
  }

  /** CLOSE_WRITE: true if it ends the peer's direction now (the owner ends what goes to its end). */
  peerEndsWrite(): boolean {
    if (!this.halfClose || this.peer !== PeerState.OPEN) return false;
    this.toPeer(PeerState.WRITE_ENDED);
    return true;
  }

  /** The peer's final packet: true if it ends the connection now (not already ended). */
  peerEnds(): boolean {
    if (this.peer === PeerState.ENDED) return false;
    this.toPeer(PeerState.ENDED);
    return true;
  }

  // ------------------------------------------------------------ our side

  /**
   * Our end came (the reader's end() or the socket's EOF) and every byte
   * before it is with the link. Sends CLOSE_WRITE, lingers, or sends our
   * final packet. True if the peer's direction ends with it (the agent's
   * final packet awaits no answer): the owner ends what goes to its end.
   */
  localEnds(): boolean {
    if (this.closed) return false;
    if (this.halfClose && this.peer === PeerState.OPEN) {
      // Our direction is done; the peer's goes on until its CLOSE_WRITE.
      this.toLocal(LocalState.WRITE_ENDED);
      this.link.sendControl({ type: 'CLOSE_WRITE', connectID: this.connectID });
      return false;
    }
    if (this.lingerAfterEndMs !== undefined && this.peer !== PeerState.ENDED) {
      // An upstream peer cannot half-close: read its answer until it closes, or it goes quiet.
      this.toLocal(LocalState.LINGERING);
      this.lingerTimer = setTimeout(this.onLingerExpired, this.lingerAfterEndMs);
      this.lingerTimer.unref();
      return false;
    }
    this.sendFinal(null);
    if (!this.role.endsWithFinalPacket) {
      this.startCloseTimer();
      return false;
    }
    return this.peerEnds();
  }

  private readonly onLingerExpired = (): void => {
    // While the link is suspended (session resume) the peer cannot answer: its silence says nothing yet.
    if (this.linkSuspended && !this.closed) {
      this.lingerTimer?.refresh();
      return;
    }
    this.lingerTimer = undefined;
    if (!this.closed) this.owner.destroy();
  };

  /** Sends our final packet, once. */
  sendFinal(err: Error | null): void {
    if (this.local >= LocalState.FINAL_SENT) return;
    const packet = this.finalPacket(err);
    this.toLocal(LocalState.FINAL_SENT);
    if (packet !== undefined) this.link.sendControl(packet);
  }

  /**
   * Our final packet answers the peer rather than opening the close when the
   * peer ended first, or, ending cleanly, both directions were already ended
   * by CLOSE_WRITEs (the peer has finished as much as we have).
   */
  private finalPacket(err: Error | null): KnownPacket | undefined {
    const answers = this.peer === PeerState.ENDED || (err === null && this.peer === PeerState.WRITE_ENDED && this.local === LocalState.WRITE_ENDED);
    return this.role.finalPacket(this.connectID, answers, err);
  }

  /** A peer (or our end) that never finishes closing must not keep the connection forever. */
  startCloseTimer(): void {
    if (this.closeTimer !== undefined || this.closed) return;
    this.closeTimer = armCloseTimer(
      this.connectID,
      this.closeTimeoutMs,
      () => this.linkSuspended,
      (err) => this.owner.destroy(err),
    );
  }

  /**
   * The one close path's end: our final packet (carrying `err`, if the role
   * says so) if still owed, the timers cleared, the link released.
   */
  close(err: Error | null): void {
    if (this.closed) return;
    const packet = this.local < LocalState.FINAL_SENT ? this.finalPacket(err) : undefined;
    this.local = LocalState.CLOSED;
    if (packet !== undefined) this.link.sendControl(packet);
    clearTimeout(this.closeTimer);
    clearTimeout(this.lingerTimer);
    this.closeTimer = this.lingerTimer = undefined;
    this.releaseLink();
  }

  // ------------------------------------------------------------ flow

  /** Takes up to `max` bytes of the peer's credit; 0 if none is left. */
  takeCredit(max: number): number {
    const n = Math.min(max, this.sendCredit);
    if (n <= 0) return 0;
    this.sendCredit -= n;
    return n;
  }

  /**
   * Grants back what our end consumed (receive-window.ts: in batches of a
   * quarter window, the window sized to how fast our end takes bytes). Only a
   * reader that keeps up (`keepsUp`) may get a wider window; a slow reader's,
   * and the memory it can pin, stays small.
   */
  grant(consumed: number, keepsUp: boolean): void {
    if (this.window === undefined || this.peer === PeerState.ENDED) return;
    const bytes = this.window.grant(consumed, keepsUp);
    if (bytes > 0) this.link.sendControl({ type: 'WINDOW_UPDATE', connectID: this.connectID, bytes: BigInt(bytes) });
  }

  /** Pauses the shared link while our end is full, with the stall limit. */
  holdLink(): void {
    if (this.holdingLink) return;
    this.holdingLink = true;
    this.link.pauseReceive(this.owner);
    const ms = this.stallTimeoutMs;
    if (ms === undefined) return;
    this.stallTimer = setTimeout(() => {
      this.stallTimer = undefined;
      this.owner.destroy(
        new ConnectionStalledError(
          `connection ${this.connectID}: its reader took nothing for ${ms} ms while ${this.owner.waitingBytes} bytes waited ` +
            "and the shared link was paused for it; closed so that the link's other connections keep flowing",
        ),
      );
    }, ms);
    this.stallTimer.unref();
  }

  /** Stops holding the link paused for this connection. */
  releaseLink(): void {
    if (!this.holdingLink) return;
    this.holdingLink = false;
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.link.resumeReceive(this.owner);
  }
}
