// One tunnelled TCP connection as a Duplex, multiplexed with others over a
// PacketLink by its connectID. Writes become DATA packets and wait for the
// link's back-pressure; received DATA is pushed.
//
// Two ways to keep a slow reader from growing memory:
// - with flow control (both ends are yurt-tunnel, proto/yurttunnel_ext.proto):
//   each side sends at most the peer's window and grants more with
//   WINDOW_UPDATE as its reader consumes; the shared link never pauses, so one
//   slow reader cannot stall the other connections;
// - without it (upstream peers): the shared link is paused while this
//   connection's buffer is full, as Konnectivity does.
//
// What waits for a reader that is behind costs about its bytes: small
// payloads are copied together and pushed as one (coalescer.ts).
//
// Konnectivity has no half-close: when either side finishes, the whole
// connection ends. Subclasses say which packet announces that (the server
// sends CLOSE_REQ and waits for CLOSE_RSP; the agent answers with CLOSE_RSP).
// Between our own ends a negotiated CLOSE_WRITE carries a half-close instead,
// and against upstream peers the server side can linger after its own end so
// that the answer to a client that half-closed still comes back.

import { Duplex } from 'node:stream';
import { answersPeer, armCloseTimer } from './close-handshake.js';
import { ConnectionStalledError } from '../protocol/errors.js';
import type { FlowWindows } from '../protocol/flow-control.js';
import type { KnownPacket } from '../protocol/packet.js';
import { readMarkFor, ReceiveWindow } from '../protocol/receive-window.js';
import { holdable, isPooled } from './buffer-pool.js';
import { Coalescer } from './coalescer.js';
import type { MuxConn } from './mux-conn.js';
import type { PacketLink } from './packet-link.js';

/**
 * Emitted (without arguments) when the peer has closed the connection without
 * an error: what is written afterwards goes nowhere.
 */
export const REMOTE_CLOSE_EVENT = 'remote-close';

/** Largest DATA payload we send: Go peers refuse gRPC messages over 4 MiB. */
export const MAX_DATA_PAYLOAD = 1024 * 1024;

export interface PacketConnOptions {
  /** Bytes buffered each way before back-pressure applies (no flow control). Default 256 KiB. */
  highWaterMark?: number;
  /**
   * Bytes written to the connection and not yet handed to the link before
   * writers wait (the writable side's highWaterMark). Default: highWaterMark.
   */
  sendHighWaterMark?: number;
  /** How long to wait for the peer to finish closing before giving up. Default 10 s. */
  closeTimeoutMs?: number;
  /** Per-connection flow control, when the link negotiated it. */
  flow?: FlowWindows;
  /**
   * Half-close, when the link negotiated it: ending our side sends
   * CLOSE_WRITE and we keep reading; the peer's CLOSE_WRITE ends our reading
   * and we keep writing. The connection closes once both directions are done.
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

export abstract class PacketConn extends Duplex implements MuxConn {
  readonly connectID: bigint;
  protected readonly link: PacketLink;
  /** Bytes received from / sent to the peer, for logs and metrics. */
  bytesReceived = 0;
  bytesSent = 0;
  /** When the connection was established (ms since the epoch). */
  readonly openedAt = Date.now();

  /** The peer has ended the connection: nothing more will arrive. */
  private remoteEnded = false;
  private finalSent = false;
  private holdingLink = false;
  private closeTimer: NodeJS.Timeout | undefined;
  private readonly closeTimeoutMs: number;
  private readonly halfClose: boolean;
  /** The peer's CLOSE_WRITE arrived: it sends no more, but still reads. */
  private peerWriteEnded = false;
  /** We sent CLOSE_WRITE. */
  private writeEndSent = false;
  private readonly lingerAfterEndMs: number | undefined;
  private lingerTimer: NodeJS.Timeout | undefined;
  private readonly stallTimeoutMs: number | undefined;
  private stallTimer: NodeJS.Timeout | undefined;

  /** Bytes we may still send before the peer grants more. */
  private sendCredit: number;
  /** A write waiting for credit. */
  private waitingForCredit: (() => void) | undefined;
  /** What the peer may send: starts at flow.receiveWindow, sized to how fast the reader takes it. */
  private readonly window: ReceiveWindow | undefined;
  /**
   * Small payloads behind what the reader has not taken yet, copied together
   * (coalescer.ts): a window of 1-byte DATA costs about its bytes, not a
   * buffered chunk each. Pushed when the reader reads (read()), when the chunk
   * is full, or before a payload that is not copied or the end.
   */
  private readonly held = new Coalescer();

  constructor(link: PacketLink, connectID: bigint, opts: PacketConnOptions = {}) {
    const flow = opts.flow;
    // With flow control the peer never sends past our window, and the buffer
    // is bounded by it, not by the mark; the mark is where _read (which grants)
    // is called, low enough that a narrowed window never stalls (readMarkFor).
    const readHwm = flow !== undefined ? readMarkFor(flow.receiveWindow) : (opts.highWaterMark ?? 256 * 1024);
    super({
      allowHalfOpen: opts.halfClose === true,
      readableHighWaterMark: readHwm,
      writableHighWaterMark: opts.sendHighWaterMark ?? opts.highWaterMark ?? 256 * 1024,
    });
    this.halfClose = opts.halfClose === true;
    this.lingerAfterEndMs = opts.halfClose === true ? undefined : opts.lingerAfterEndMs;
    this.stallTimeoutMs = flow === undefined ? opts.stallTimeoutMs : undefined;
    this.link = link;
    this.connectID = connectID;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 10_000;
    this.sendCredit = flow?.sendWindow ?? Infinity;
    this.window = flow !== undefined ? new ReceiveWindow(flow.receiveWindow, flow.roundTripMs) : undefined;
  }

  /**
   * The packet that tells the peer this side is done, or undefined if none is
   * owed. `remoteInitiated` is true when the peer ended the connection first.
   */
  protected abstract finalPacket(remoteInitiated: boolean, err: Error | null): KnownPacket | undefined;

  /** True if, once our final packet is sent, no acknowledgement is awaited. */
  protected abstract readonly endsWithFinalPacket: boolean;

  /** Whether the peer has ended the connection. */
  get remoteClosed(): boolean {
    return this.remoteEnded;
  }

  /** Called by the owner for each DATA packet of this connection. */
  deliver(data: Buffer): void {
    if (this.remoteEnded || this.peerWriteEnded || this.destroyed || this.readableEnded) return;
    if (this.lingerTimer !== undefined) this.lingerTimer.refresh();
    this.bytesReceived += data.length;
    this.toReader(data);
    // With flow control the buffer is bounded by our window; pausing the link
    // is only the fallback for a peer that ignores it (or has none).
    const full = this.window === undefined ? this.waiting >= this.readableHighWaterMark : this.window.exceeded(this.bytesReceived);
    if (full && !this.holdingLink) {
      this.holdingLink = true;
      this.link.pauseReceive(this);
      this.startStallTimer();
    }
  }

  /**
   * Pushes `data` to a reader that has taken all that was pushed. Behind what
   * it has not taken, a small payload is held with the others that wait
   * (`held`), whose chunk then waits as one.
   */
  private toReader(data: Buffer): void {
    if (this.held.length === 0 && this.readableLength === 0) {
      // What is pushed waits for a reader we cannot follow: a view of a pooled slab
      // (a joined message, the link's only while its packet is handled) is copied,
      // and so is a small view of a large read (holdable).
      const held = holdable(data);
      this.push(held === data && isPooled(data) ? Buffer.from(data) : held);
    } else if (Coalescer.takes(data)) {
      const full = this.held.add(data);
      if (full !== undefined) this.push(full);
    } else {
      this.pushHeld();
      this.push(isPooled(data) ? Buffer.from(data) : data);
    }
  }

  /** Pushes what is held, if anything. */
  private pushHeld(): void {
    const chunk = this.held.take();
    if (chunk !== undefined) this.push(chunk);
  }

  /** Ends what the reader gets, after every byte. */
  private pushEnd(): void {
    this.pushHeld();
    this.push(null);
  }

  /** Bytes received that the reader has not taken. */
  private get waiting(): number {
    return this.readableLength + this.held.length;
  }

  private startStallTimer(): void {
    if (this.stallTimeoutMs === undefined) return;
    const ms = this.stallTimeoutMs;
    this.stallTimer = setTimeout(() => {
      this.stallTimer = undefined;
      this.destroy(
        new ConnectionStalledError(
          `connection ${this.connectID}: its reader took nothing for ${ms} ms while ${this.waiting} bytes waited ` +
            "and the shared link was paused for it; closed so that the link's other connections keep flowing",
        ),
      );
    }, ms);
    this.stallTimer.unref();
  }

  /** Stops holding the link paused for this connection. */
  private releaseLink(): void {
    if (!this.holdingLink) return;
    this.holdingLink = false;
    clearTimeout(this.stallTimer);
    this.stallTimer = undefined;
    this.link.resumeReceive(this);
  }

  /** Called by the owner on WINDOW_UPDATE: the peer allows `bytes` more. */
  grantCredit(bytes: number): void {
    if (this.window === undefined || !(bytes > 0)) return;
    this.sendCredit += bytes;
    const resume = this.waitingForCredit;
    if (resume !== undefined) {
      this.waitingForCredit = undefined;
      resume();
    }
  }

  /**
   * Called by the owner when the peer ended the connection. Without an error,
   * data already received is still delivered before 'end'.
   */
  remoteClose(err?: Error): void {
    if (this.remoteEnded) return;
    this.remoteEnded = true;
    if (err !== undefined) {
      this.destroy(err);
      return;
    }
    // The peer reads nothing more: a write waiting for its credit is dropped
    // now, or it would hold our end (and _final) until the close timer.
    this.releaseWaitingWrite();
    this.pushEnd();
    this.startCloseTimer();
    // Whatever is written from now on is dropped: the owner can stop producing it.
    this.emit(REMOTE_CLOSE_EVENT);
  }

  /** Called by the owner on CLOSE_WRITE: the peer sends no more, and still reads what we send. */
  remoteEndWrite(): void {
    if (!this.halfClose || this.peerWriteEnded || this.remoteEnded) return;
    this.peerWriteEnded = true;
    this.pushEnd();
  }

  private releaseWaitingWrite(): void {
    const resume = this.waitingForCredit;
    this.waitingForCredit = undefined;
    resume?.();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.remoteEnded || this.finalSent) {
      // The peer is gone for this connection; what is still written is dropped.
      cb();
      return;
    }
    this.bytesSent += chunk.length;
    this.sendFrom(chunk, 0, cb);
  }

  /** Sends `chunk` from `offset` in pieces no larger than MAX_DATA_PAYLOAD or the credit left. */
  private sendFrom(chunk: Buffer, offset: number, cb: (err?: Error | null) => void): void {
    if (offset === chunk.length) {
      cb();
      return;
    }
    if (this.destroyed || this.finalSent || this.remoteEnded) {
      // Nobody will read the rest.
      cb();
      return;
    }
    if (this.sendCredit <= 0) {
      this.waitingForCredit = () => this.sendFrom(chunk, offset, cb);
      return;
    }
    const n = Math.min(chunk.length - offset, MAX_DATA_PAYLOAD, this.sendCredit);
    this.sendCredit -= n;
    this.link.sendData(this.connectID, offset === 0 && n === chunk.length ? chunk : chunk.subarray(offset, offset + n), (err) => {
      if (err) cb(err);
      else this.sendFrom(chunk, offset + n, cb);
    });
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.halfClose && !this.remoteEnded && !this.peerWriteEnded) {
      // Our direction is done; the peer's goes on until its CLOSE_WRITE.
      this.writeEndSent = true;
      this.link.sendControl({ type: 'CLOSE_WRITE', connectID: this.connectID });
      cb();
      return;
    }
    if (this.lingerAfterEndMs !== undefined && !this.remoteEnded) {
      // An upstream peer cannot half-close: read its answer until it closes, or it goes quiet.
      this.lingerTimer = setTimeout(() => {
        this.lingerTimer = undefined;
        this.destroy();
      }, this.lingerAfterEndMs);
      this.lingerTimer.unref();
      cb();
      return;
    }
    this.sendFinal(null);
    if (this.endsWithFinalPacket) {
      if (!this.remoteEnded) {
        this.remoteEnded = true;
        this.pushEnd();
      }
    } else {
      this.startCloseTimer();
    }
    cb();
  }

  /**
   * Node's Readable cannot append to the chunk it buffered last, so what is
   * held is pushed here, before every read that takes bytes: every reader
   * reads through read() (flowing mode, pipe(), 'readable', async iteration).
   * _read cannot be the place: Node calls it once after each push, often
   * before the reader took anything (to fill its buffer up to the mark), and
   * held bytes would then wait for a push that does not come.
   */
  override read(size?: number): Buffer | null {
    if (size !== 0) this.pushHeld();
    const chunk = super.read(size) as Buffer | null;
    // Node calls _read before it takes the bytes it returns, and then not
    // again before a push: a chunk that is much of the window would be
    // granted back only at the next push, which the peer, out of credit,
    // never sends. So what a read took is granted back here too.
    if (chunk !== null) this.taken(false);
    return chunk;
  }

  override _read(): void {
    // A reader that asks with nothing left (not even held) is waiting on the window.
    this.taken(this.waiting === 0);
  }

  /** The reader took bytes, or asks for more. */
  private taken(keepsUp: boolean): void {
    if (this.destroyed) return;
    // Held bytes count as not taken: a read hands them over first.
    if (this.waiting < this.readableHighWaterMark) this.releaseLink();
    if (this.window !== undefined && !this.remoteEnded) {
      // Grant back what the reader has consumed (receive-window.ts). A reader
      // that has emptied the buffer is waiting on the window, not the other
      // way round: only its window may widen. A slow reader's buffer is never
      // empty here, so its window, and the memory it can pin, stays small.
      const bytes = this.window.grant(this.bytesReceived - this.waiting, keepsUp);
      if (bytes > 0) this.link.sendControl({ type: 'WINDOW_UPDATE', connectID: this.connectID, bytes: BigInt(bytes) });
    }
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.sendFinal(err);
    // A write waiting for credit ends (sendFrom drops it, the connection being destroyed):
    // its callback, and those of the writes queued behind it, still run, once each.
    this.releaseWaitingWrite();
    clearTimeout(this.lingerTimer);
    if (this.closeTimer !== undefined) {
      clearTimeout(this.closeTimer);
      this.closeTimer = undefined;
    }
    this.releaseLink();
    this.held.clear();
    cb(err);
  }

  private sendFinal(err: Error | null): void {
    if (this.finalSent) return;
    this.finalSent = true;
    const packet = this.finalPacket(answersPeer(this.remoteEnded, this.peerWriteEnded, this.writeEndSent, err), err);
    if (packet !== undefined) this.link.sendControl(packet);
  }

  /** The link's transport is gone for now and may come back (session resume): waiting on the peer is no failure yet. */
  get linkSuspended(): boolean {
    return this.link.suspended === true;
  }

  /** A peer (or a local reader) that never finishes closing must not keep the connection forever. */
  private startCloseTimer(): void {
    if (this.closeTimer !== undefined || this.destroyed) return;
    this.closeTimer = armCloseTimer(
      this.connectID,
      this.closeTimeoutMs,
      () => this.linkSuspended,
      (err) => this.destroy(err),
    );
  }
}
