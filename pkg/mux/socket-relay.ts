// One tunnelled connection joined straight to a local socket: the agent's
// connection to its target, the server's to an HTTP CONNECT client. The peer's
// half is the connection core's (conn-core.ts), as for a PacketConn; this
// class moves chunks between the socket and the link with explicit
// back-pressure (no Duplex and two pipe()s per connection: profiles showed
// them as a quarter of what a new connection costs), and ends the socket on
// the one close path (destroy → finish). A failure on either side is an
// abortive close of the other (abortStream); a clean end (EOF) stays an end.

import type { Socket } from 'node:net';
import type { CloseRole } from './close-handshake.js';
import { ConnCore, PeerState } from './conn-core.js';
import { ConnectionClosedError, InternalError } from '../protocol/errors.js';
import { abortStream } from './abort.js';
import { releaseSlab } from './buffer-pool.js';
import { HeldWrites } from './held-writes.js';
import type { MuxConn } from './mux-conn.js';
import { MAX_DATA_PAYLOAD, type PacketConnOptions } from './packet-conn.js';
import type { PacketLink } from './packet-link.js';
import type { PooledReads } from './pooled-reads.js';

/**
 * As for a PacketConn. `highWaterMark` bounds what waits in the socket's
 * write buffer before the link is paused (without flow control);
 * `sendHighWaterMark` what was read from the socket and not yet taken by the
 * link before the socket is paused.
 */
export type SocketRelayOptions = PacketConnOptions;

/** How a socket that closed before its end is reported to the other side. */
const CUT = 'the other side of the connection closed before its end';

/** What a finished relay leaves on its socket for an error still to come (abortStream's, on the next tick). */
const ignoreLateError = (): void => {};

export class SocketRelay implements MuxConn {
  readonly connectID: bigint;
  protected readonly link: PacketLink;
  bytesReceived = 0;
  bytesSent = 0;
  readonly openedAt = Date.now();
  /** Called once when the connection is over, with the failure that ended it, if any. */
  onClose: ((err: Error | undefined) => void) | undefined;

  private socket: Socket | undefined;
  /** What the peer sent before the socket was attached, up to what `held` holds. */
  private early: Buffer[] | undefined;
  /** Why the connection failed before the socket was attached. */
  private failure: Error | undefined;
  /** The connection's states, its close handshake and flow control. */
  protected readonly core: ConnCore;

  // The socket's side.
  /** The socket's EOF was seen. */
  private localEnded = false;
  /** What follows the socket's EOF (CLOSE_WRITE, linger or the final packet) has run. */
  private localEndHandled = false;
  /** socket.end() was asked for: nothing more goes to the socket. */
  private inboundEnded = false;
  /** Nothing more is read from the socket (the peer is gone; the socket closes once its writes are out). */
  private stopReading = false;
  /** We close the socket ourselves after a clean end: its close is not a failure. */
  private closingSocket = false;
  /** The socket closed cleanly while bytes for the peer still waited. */
  private socketClosed = false;

  private readonly highWaterMark: number;
  private readonly sendHighWaterMark: number;

  // Socket → link.
  /** Chunks read from the socket and not yet handed to the link; the first from `queueOffset`. */
  private readonly queue: Buffer[] = [];
  private queueOffset = 0;
  /** Bytes read from the socket that the link has not taken yet. */
  private queued = 0;
  /** Size of the piece the link has not called back for. */
  private inFlight = 0;
  private inLink = false;
  private inSendCall = false;
  private socketPaused = false;

  // Link → socket.
  /** The socket's write buffer (with what is held) is over its mark: what it holds is not consumed yet. */
  private awaitingDrain = false;
  /**
   * Small payloads waiting behind what the socket has not written yet (or
   * for the socket to be attached), copied together (held-writes.ts): a window
   * of 1-byte DATA costs about its bytes, not a socket write each.
   */
  private readonly held: HeldWrites;
  /** The close role's endsWithFinalPacket: the agent's side, which awaits no answer to its CLOSE_RSP. */
  private readonly agentSide: boolean;

  constructor(link: PacketLink, connectID: bigint, role: CloseRole, opts: SocketRelayOptions = {}) {
    this.link = link;
    this.connectID = connectID;
    this.agentSide = role.endsWithFinalPacket;
    this.highWaterMark = opts.highWaterMark ?? 256 * 1024;
    this.sendHighWaterMark = opts.sendHighWaterMark ?? this.highWaterMark;
    this.core = new ConnCore(link, connectID, role, this, opts);
    this.held = new HeldWrites(this.onSocketDrain);
  }

  get remoteClosed(): boolean {
    return this.core.peer === PeerState.ENDED;
  }

  /** Whether the connection is over. */
  get closed(): boolean {
    return this.core.closed;
  }

  /** Bytes received that the socket has not written yet (for the stall error). */
  get waitingBytes(): number {
    return (this.socket?.writableLength ?? 0) + this.held.length;
  }

  /**
   * Joins the connection to `socket`. `pending` holds bytes the socket
   * delivered before (they go to the peer first); a socket whose EOF was
   * already read counts as ended. A socket that reads into pooled slabs
   * (`reads`, its `onread`) emits no 'data': its chunks come from `reads`.
   */
  attach(socket: Socket, pending: readonly Buffer[] = [], reads?: PooledReads): void {
    if (this.socket !== undefined) throw new InternalError(`connection ${this.connectID} is already attached to a socket`);
    this.socket = socket;
    if (this.core.closed) {
      abortStream(socket, this.failure ?? new ConnectionClosedError(CUT));
      return;
    }
    if (reads === undefined) socket.on('data', this.onSocketData);
    socket.on('end', this.onSocketEnd);
    socket.on('error', this.onSocketError);
    socket.on('close', this.onSocketClose);
    socket.on('drain', this.onSocketDrain);
    const early = this.early ?? [];
    this.early = undefined;
    const rest = this.held.take();
    if (rest !== undefined) early.push(rest);
    for (const chunk of early) {
      this.toSocket(socket, chunk);
      releaseSlab(chunk);
    }
    if (this.inboundEnded) this.endSocket(socket);
    if (this.stopReading) this.closeAfterFlush(socket);
    for (const chunk of pending) this.onSocketData(chunk);
    reads?.deliverTo(this.onSocketData);
    if (socket.destroyed) this.onSocketClose();
    else if (socket.readableEnded) this.onSocketEnd();
    else if (!this.socketPaused && !this.stopReading) socket.resume();
  }

  // ------------------------------------------------------------ link → socket

  deliver(data: Buffer): void {
    const core = this.core;
    if (core.peer !== PeerState.OPEN || this.inboundEnded || core.closed) return;
    core.received();
    this.bytesReceived += data.length;
    const socket = this.socket;
    if (socket === undefined) this.held.holdEarly(data, (this.early ??= []));
    else this.toSocket(socket, data);
  }

  private toSocket(socket: Socket, data: Buffer): void {
    if (!this.held.write(socket, data)) this.awaitingDrain = true;
    // The link is held only while a release is due: a 'drain', or the last of
    // our writes calling back (below the socket's own mark, write() returns
    // true and no 'drain' comes).
    if (!this.awaitingDrain) {
      this.grant(true);
      return;
    }
    const window = this.core.window;
    if (window === undefined) {
      if (socket.writableLength + this.held.length >= this.highWaterMark) this.core.holdLink();
    } else if (window.exceeded(this.bytesReceived)) {
      // A peer that ignores our window (it has sent more than we granted it):
      // pause the link, as without flow control. The socket's buffer alone is
      // no sign of that: it also holds granted bytes its reader has not taken.
      this.core.holdLink();
    }
  }

  /** The socket wrote what it held ('drain'), or what it held up to the last write of held bytes. */
  private readonly onSocketDrain = (): void => {
    const socket = this.socket!;
    // After the socket's end nothing more is written (or granted), as no 'drain' comes after end().
    if (this.core.closed || this.inboundEnded || socket.destroyed) return;
    this.held.flush(socket);
    // Over its mark (what was held, or a payload written after it), the socket's 'drain' is the release.
    if (socket.writableNeedDrain) {
      this.awaitingDrain = true;
      return;
    }
    if (!this.awaitingDrain) return;
    this.awaitingDrain = false;
    this.core.releaseLink();
    // A reader that held us up gets its credit back, but no wider window.
    this.grant(false);
  };

  /** Grants back what the socket took: only a socket that keeps up gets a wider window. */
  private grant(keepsUp: boolean): void {
    this.core.grant(this.bytesReceived, keepsUp);
  }

  /** Ends what goes to the socket, after what was delivered. */
  private endInbound(): void {
    if (this.inboundEnded) return;
    this.inboundEnded = true;
    if (this.socket !== undefined) this.endSocket(this.socket);
  }

  /** The socket's end comes after every byte: what is held is written first. */
  private endSocket(socket: Socket): void {
    this.held.flush(socket);
    socket.end();
  }

  remoteEndWrite(): void {
    if (this.core.closed) return;
    if (this.core.peerEndsWrite()) this.endInbound();
  }

  remoteClose(err?: Error): void {
    if (this.core.closed || !this.core.peerEnds()) return;
    if (err !== undefined) {
      this.destroy(err);
      return;
    }
    // The peer reads nothing more: what waits to be sent is dropped.
    this.dropQueue();
    const socket = this.socket;
    if (this.agentSide && this.localEnded && socket !== undefined && socket.writableLength === 0 && this.held.length === 0) {
      // The agent, its target's EOF read and nothing left to write: a close
      // is a FIN as an end() would be (nothing unread can make it a reset),
      // without the shutdown, the wait for 'finish' and the close timer, and
      // CLOSE_RSP goes out in this turn.
      this.closingSocket = true;
      socket.destroy();
      this.finish(undefined);
      return;
    }
    this.endInbound();
    this.core.startCloseTimer();
    // The agent stops reading its target: left to flow, the socket would be
    // drained at full speed into garbage until the target answers our FIN
    // (megabytes per connection on a fast link; under churn, most of the
    // agent's memory peak). A server without half-close ends at once too, as
    // a Duplex that may not stay half-open. Only a half-closing server waits
    // for its caller's end.
    if (this.agentSide || !this.core.halfClose) {
      this.stopReading = true;
      if (this.socket !== undefined) this.closeAfterFlush(this.socket);
    }
    if (!this.inLink) this.sendQueueEmpty();
  }

  /** Stops reading `socket` and closes it once what was written to it is out. */
  private closeAfterFlush(socket: Socket): void {
    socket.pause();
    if (socket.writableFinished) this.closeSocketCleanly();
    else socket.once('finish', this.closeSocketCleanly);
  }

  private readonly closeSocketCleanly = (): void => {
    if (this.core.closed) return;
    this.closingSocket = true;
    this.socket!.destroy();
  };

  // ------------------------------------------------------------ socket → link

  private readonly onSocketData = (chunk: Buffer): void => {
    // The peer is gone for this connection: nobody will read it.
    if (this.core.sendsNoMore) {
      releaseSlab(chunk);
      return;
    }
    this.bytesSent += chunk.length;
    this.queued += chunk.length;
    this.queue.push(chunk);
    if (!this.inLink) this.pump();
    // pump() may end the connection (the link's callback runs synchronously).
    if (this.queued >= this.sendHighWaterMark && !this.socketPaused && !this.core.closed) {
      this.socketPaused = true;
      this.socket!.pause();
    }
  };

  /** Hands queued chunks to the link, in pieces no larger than MAX_DATA_PAYLOAD or the credit left. */
  private pump(): void {
    const queue = this.queue;
    while (queue.length > 0) {
      if (this.core.sendsNoMore) {
        this.dropQueue();
        break;
      }
      const chunk = queue[0]!;
      const offset = this.queueOffset;
      const n = this.core.takeCredit(Math.min(chunk.length - offset, MAX_DATA_PAYLOAD));
      if (n === 0) return;
      const piece = offset === 0 && n === chunk.length ? chunk : chunk.subarray(offset, offset + n);
      const last = offset + n === chunk.length;
      if (last) {
        queue.shift();
        this.queueOffset = 0;
      } else {
        this.queueOffset = offset + n;
      }
      this.inFlight = n;
      this.inLink = true;
      this.inSendCall = true;
      this.link.sendData(this.connectID, piece, this.onLinkTook);
      this.inSendCall = false;
      // The link keeps what it needs of a pooled slab (retainSlab): the queue's hold ends here.
      if (last) releaseSlab(chunk);
      // The link calls back later, when it has room again.
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- onLinkTook clears it when the link calls back within sendData()
      if (this.inLink) return;
    }
    this.sendQueueEmpty();
  }

  private readonly onLinkTook = (err?: Error | null): void => {
    this.inLink = false;
    this.queued -= this.inFlight;
    this.inFlight = 0;
    if (err) {
      this.destroy(err);
      return;
    }
    if (!this.inSendCall) this.pump();
  };

  grantCredit(bytes: number): void {
    if (this.core.grantCredit(bytes) && !this.inLink && this.queue.length > 0) this.pump();
  }

  private dropQueue(): void {
    for (const chunk of this.queue) releaseSlab(chunk);
    this.queue.length = 0;
    this.queueOffset = 0;
    this.queued = this.inFlight;
  }

  /** Everything read from the socket is with the link. */
  private sendQueueEmpty(): void {
    if (this.core.closed) return;
    if (this.socketPaused) {
      this.socketPaused = false;
      if (!this.stopReading) this.socket?.resume();
    }
    if (this.localEnded) this.localEnd();
    if (this.socketClosed) this.finish(undefined);
  }

  private readonly onSocketEnd = (): void => {
    if (this.localEnded || this.core.closed) return;
    this.localEnded = true;
    // Otherwise pump() gets here once the link has taken the last bytes.
    if (!this.inLink && this.queue.length === 0) this.localEnd();
  };

  /** The socket's bytes have all gone to the peer after its EOF: tell the peer. */
  private localEnd(): void {
    if (this.localEndHandled || this.core.closed) return;
    this.localEndHandled = true;
    if (this.core.localEnds()) this.endInbound();
  }

  private readonly onSocketError = (err: Error): void => this.destroy(err);

  private readonly onSocketClose = (): void => {
    if (this.core.closed) return;
    if (this.closingSocket) {
      this.finish(undefined);
      return;
    }
    if (!this.localEnded) {
      // A close without EOF: a reset, or a local destroy.
      this.destroy(new ConnectionClosedError(CUT));
      return;
    }
    if (this.inLink || this.queue.length > 0) {
      // The last bytes still wait for the link or the peer's window.
      this.socketClosed = true;
      this.core.startCloseTimer();
      return;
    }
    this.localEnd();
    this.finish(undefined);
  };

  // ------------------------------------------------------------ the close path

  /**
   * Closes the connection now: the socket abortively, the peer told (with
   * `err`, a failure, if any; a socket attached later is aborted too).
   */
  destroy(err?: Error): void {
    if (this.core.closed) return;
    if (this.socket !== undefined) abortStream(this.socket, err ?? new ConnectionClosedError(CUT));
    else this.failure = err;
    this.finish(err);
  }

  private finish(err: Error | undefined): void {
    if (this.core.closed) return;
    this.core.close(err ?? null);
    if (this.socket !== undefined) this.detachFrom(this.socket);
    this.dropQueue();
    if (this.early !== undefined) for (const chunk of this.early) releaseSlab(chunk);
    this.early = undefined;
    this.held.clear();
    const onClose = this.onClose;
    this.onClose = undefined;
    onClose?.(err);
  }

  /**
   * The connection is over and every handler of ours is a no-op: the socket
   * keeps none of them. A closed socket can outlive scavenges in V8's young
   * generation while an old-space object still points at it (a rehashed
   * Map's old table did, measured on Node 20.20),
   * and through these closures it kept the relay and everything the relay
   * holds alive with it, all promoted to the old generation: 3.1 KB per
   * connection in the server, 1.2 KB without them.
   */
  private detachFrom(socket: Socket): void {
    socket.off('data', this.onSocketData);
    socket.off('end', this.onSocketEnd);
    socket.off('error', this.onSocketError);
    socket.off('close', this.onSocketClose);
    socket.off('drain', this.onSocketDrain);
    socket.off('finish', this.closeSocketCleanly);
    if (socket.listenerCount('error') === 0) socket.on('error', ignoreLateError);
  }
}
