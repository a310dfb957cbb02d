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
// The close handshake, half-close, flow control's credit and window, holding
// the link and the linger are the connection core's (conn-core.ts): this
// class is its Duplex, for callers in this process; socket-relay.ts joins
// the same core straight to a socket.

import { Duplex } from 'node:stream';
import type { CloseRole } from './close-handshake.js';
import { ConnCore, PeerState, type ConnCoreOptions, type CoreOwner } from './conn-core.js';
import { readMarkFor } from '../protocol/receive-window.js';
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

export interface PacketConnOptions extends ConnCoreOptions {
  /** Bytes buffered each way before back-pressure applies (no flow control). Default 256 KiB. */
  highWaterMark?: number;
  /**
   * Bytes written to the connection and not yet handed to the link before
   * writers wait (the writable side's highWaterMark). Default: highWaterMark.
   */
  sendHighWaterMark?: number;
}

export class PacketConn extends Duplex implements MuxConn, CoreOwner {
  readonly connectID: bigint;
  protected readonly link: PacketLink;
  /** Bytes received from / sent to the peer, for logs and metrics. */
  bytesReceived = 0;
  bytesSent = 0;
  /** When the connection was established (ms since the epoch). */
  readonly openedAt = Date.now();
  /** The connection's states, its close handshake and flow control. */
  protected readonly core: ConnCore;

  /** A write waiting for credit. */
  private waitingForCredit: (() => void) | undefined;
  /**
   * Small payloads behind what the reader has not taken yet, copied together
   * (coalescer.ts): a window of 1-byte DATA costs about its bytes, not a
   * buffered chunk each. Pushed when the reader reads (read()), when the chunk
   * is full, or before a payload that is not copied or the end.
   */
  private readonly held = new Coalescer();

  constructor(link: PacketLink, connectID: bigint, role: CloseRole, opts: PacketConnOptions = {}) {
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
    this.link = link;
    this.connectID = connectID;
    this.core = new ConnCore(link, connectID, role, this, opts);
  }

  /** Whether the peer has ended the connection. */
  get remoteClosed(): boolean {
    return this.core.peer === PeerState.ENDED;
  }

  /** Called by the owner for each DATA packet of this connection. */
  deliver(data: Buffer): void {
    const core = this.core;
    if (core.peer !== PeerState.OPEN || this.destroyed || this.readableEnded) return;
    core.received();
    this.bytesReceived += data.length;
    this.toReader(data);
    // With flow control the buffer is bounded by our window; pausing the link
    // is only the fallback for a peer that ignores it (or has none).
    const window = core.window;
    if (window === undefined ? this.waitingBytes >= this.readableHighWaterMark : window.exceeded(this.bytesReceived)) core.holdLink();
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
  get waitingBytes(): number {
    return this.readableLength + this.held.length;
  }

  /** Called by the owner on WINDOW_UPDATE: the peer allows `bytes` more. */
  grantCredit(bytes: number): void {
    if (this.core.grantCredit(bytes)) this.releaseWaitingWrite();
  }

  /**
   * Called by the owner when the peer ended the connection. Without an error,
   * data already received is still delivered before 'end'.
   */
  remoteClose(err?: Error): void {
    if (!this.core.peerEnds()) return;
    if (err !== undefined) {
      this.destroy(err);
      return;
    }
    // The peer reads nothing more: a write waiting for its credit is dropped
    // now, or it would hold our end (and _final) until the close timer.
    this.releaseWaitingWrite();
    this.pushEnd();
    this.core.startCloseTimer();
    // Whatever is written from now on is dropped: the owner can stop producing it.
    this.emit(REMOTE_CLOSE_EVENT);
  }

  /** Called by the owner on CLOSE_WRITE: the peer sends no more, and still reads what we send. */
  remoteEndWrite(): void {
    if (this.core.peerEndsWrite()) this.pushEnd();
  }

  private releaseWaitingWrite(): void {
    const resume = this.waitingForCredit;
    this.waitingForCredit = undefined;
    resume?.();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.core.sendsNoMore) {
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
    if (this.destroyed || this.core.sendsNoMore) {
      // Nobody will read the rest.
      cb();
      return;
    }
    const n = this.core.takeCredit(Math.min(chunk.length - offset, MAX_DATA_PAYLOAD));
    if (n === 0) {
      this.waitingForCredit = () => this.sendFrom(chunk, offset, cb);
      return;
    }
    this.link.sendData(this.connectID, offset === 0 && n === chunk.length ? chunk : chunk.subarray(offset, offset + n), (err) => {
      if (err) cb(err);
      else this.sendFrom(chunk, offset + n, cb);
    });
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.core.localEnds()) this.pushEnd();
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
    this.taken(this.waitingBytes === 0);
  }

  /** The reader took bytes, or asks for more. */
  private taken(keepsUp: boolean): void {
    if (this.destroyed) return;
    // Held bytes count as not taken: a read hands them over first.
    const waiting = this.waitingBytes;
    if (waiting < this.readableHighWaterMark) this.core.releaseLink();
    // Grant back what the reader has consumed. A reader that has emptied the
    // buffer is waiting on the window, not the other way round. A slow
    // reader's buffer is never empty here, so its window stays small.
    this.core.grant(this.bytesReceived - waiting, keepsUp);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.core.close(err);
    // A write waiting for credit ends (sendFrom drops it, the connection being destroyed):
    // its callback, and those of the writes queued behind it, still run, once each.
    this.releaseWaitingWrite();
    this.held.clear();
    cb(err);
  }

  /** The link's transport is gone for now and may come back (session resume): waiting on the peer is no failure yet. */
  get linkSuspended(): boolean {
    return this.core.linkSuspended;
  }
}
