// One tunnelled TCP connection as a Duplex, multiplexed with others over a
// PacketLink by its connectID. Writes become DATA packets and wait for the
// link's back-pressure; received DATA is pushed, and when the reader falls
// behind the shared link is paused rather than buffering without bound.
//
// The protocol has no half-close: when either side finishes, the whole
// connection ends. Subclasses say which packet announces that (the server
// sends CLOSE_REQ and waits for CLOSE_RSP; the agent answers with CLOSE_RSP).

import { Duplex } from 'node:stream';
import { ConnectionClosedError } from '../protocol/errors.js';
import type { KnownPacket } from '../protocol/packet.js';
import type { PacketLink } from './packet-link.js';

/** Largest DATA payload we send: Go peers refuse gRPC messages over 4 MiB. */
export const MAX_DATA_PAYLOAD = 1024 * 1024;

export interface PacketConnOptions {
  /** Bytes buffered each way before back-pressure applies. Default 256 KiB. */
  highWaterMark?: number;
  /** How long to wait for the peer to finish closing before giving up. Default 10 s. */
  closeTimeoutMs?: number;
}

export abstract class PacketConn extends Duplex {
  readonly connectID: bigint;
  protected readonly link: PacketLink;
  /** Bytes received from / sent to the peer, for logs and metrics. */
  bytesReceived = 0;
  bytesSent = 0;

  /** The peer has ended the connection: nothing more will arrive. */
  private remoteEnded = false;
  private finalSent = false;
  private holdingLink = false;
  private closeTimer: NodeJS.Timeout | undefined;
  private readonly closeTimeoutMs: number;

  constructor(link: PacketLink, connectID: bigint, opts: PacketConnOptions = {}) {
    const hwm = opts.highWaterMark ?? 256 * 1024;
    super({ allowHalfOpen: false, readableHighWaterMark: hwm, writableHighWaterMark: hwm });
    this.link = link;
    this.connectID = connectID;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 10_000;
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
    if (this.remoteEnded || this.destroyed || this.readableEnded) return;
    this.bytesReceived += data.length;
    if (!this.push(data) && !this.holdingLink) {
      this.holdingLink = true;
      this.link.pauseReceive(this);
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
    this.push(null);
    this.startCloseTimer();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.remoteEnded || this.finalSent) {
      // The peer is gone for this connection; what is still written is dropped.
      cb();
      return;
    }
    this.bytesSent += chunk.length;
    if (chunk.length <= MAX_DATA_PAYLOAD) {
      this.link.sendData(this.connectID, chunk, cb);
      return;
    }
    this.writeInPieces(chunk, 0, cb);
  }

  private writeInPieces(chunk: Buffer, offset: number, cb: (err?: Error | null) => void): void {
    const end = Math.min(offset + MAX_DATA_PAYLOAD, chunk.length);
    this.link.sendData(this.connectID, chunk.subarray(offset, end), (err) => {
      if (err || end === chunk.length) cb(err);
      else this.writeInPieces(chunk, end, cb);
    });
  }

  override _final(cb: (err?: Error | null) => void): void {
    this.sendFinal(null);
    if (this.endsWithFinalPacket) {
      if (!this.remoteEnded) {
        this.remoteEnded = true;
        this.push(null);
      }
    } else {
      this.startCloseTimer();
    }
    cb();
  }

  override _read(): void {
    if (this.holdingLink) {
      this.holdingLink = false;
      this.link.resumeReceive(this);
    }
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.sendFinal(err);
    if (this.closeTimer !== undefined) {
      clearTimeout(this.closeTimer);
      this.closeTimer = undefined;
    }
    if (this.holdingLink) {
      this.holdingLink = false;
      this.link.resumeReceive(this);
    }
    cb(err);
  }

  private sendFinal(err: Error | null): void {
    if (this.finalSent) return;
    this.finalSent = true;
    const packet = this.finalPacket(this.remoteEnded, err);
    if (packet !== undefined) this.link.sendControl(packet);
  }

  /** A peer (or a local reader) that never finishes closing must not keep the connection forever. */
  private startCloseTimer(): void {
    if (this.closeTimer !== undefined || this.destroyed) return;
    this.closeTimer = setTimeout(() => {
      this.closeTimer = undefined;
      this.destroy(
        new ConnectionClosedError(
          `connection ${this.connectID} did not finish closing within ${this.closeTimeoutMs} ms; dropped`,
        ),
      );
    }, this.closeTimeoutMs);
    this.closeTimer.unref();
  }
}
