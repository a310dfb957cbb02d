// One SPDY stream as a Node.js Duplex: write() sends DATA frames, end() sends
// FIN, reading yields the peer's DATA until its FIN. Back-pressure: a full
// read buffer pauses the whole session socket until this stream is read.

import { Duplex } from 'node:stream';
import { SpdySessionClosedError, SpdyStreamResetError } from './errors.js';
import { RST_STATUS } from './spdy-frames.js';
import type { SpdyHeaders } from './spdy-headers.js';

/** What a stream needs from its session. */
export interface StreamHost {
  writeData(id: number, chunk: Buffer, fin: boolean, cb: (err?: Error) => void): void;
  writeReply(id: number, headers: SpdyHeaders): void;
  writeRst(id: number, status: number): void;
  block(stream: SpdyStream): void;
  unblock(stream: SpdyStream): void;
  forget(stream: SpdyStream): void;
  /** The session's connection is closed or closing: nothing more can be sent. */
  isGone(): boolean;
}

export class SpdyStream extends Duplex {
  readonly id: number;
  /** Opened by this side (we sent the SYN_STREAM). */
  readonly local: boolean;
  /** The peer's headers: of its SYN_STREAM, or of its SYN_REPLY for a stream we opened. */
  headers: SpdyHeaders;
  /** A SYN_REPLY was sent (peer-opened) or received (self-opened). */
  replied = false;
  localFin = false;
  remoteFin = false;
  /** RST_STREAM status if the stream was reset by either side. */
  resetStatus: number | null = null;

  constructor(
    private readonly host: StreamHost,
    id: number,
    local: boolean,
    headers: SpdyHeaders,
  ) {
    super({ allowHalfOpen: true });
    this.id = id;
    this.local = local;
    this.headers = headers;
  }

  /** Accepts a peer-opened stream (SYN_REPLY). Writing replies implicitly. */
  reply(headers: SpdyHeaders = {}): void {
    if (this.local || this.replied || this.resetStatus !== null) return;
    this.replied = true;
    this.host.writeReply(this.id, headers);
  }

  /** Resets the stream (RST_STREAM) and destroys it without an error. */
  reset(status: number = RST_STATUS.cancel): void {
    if (this.resetStatus === null && !this.host.isGone()) {
      this.resetStatus = status;
      this.host.writeRst(this.id, status);
    }
    this.destroy();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (!this.local) this.reply();
    this.host.writeData(this.id, chunk, false, cb);
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (!this.local) this.reply();
    if (this.localFin) {
      cb(); // FIN went with the SYN_STREAM, or the stream is unidirectional
      return;
    }
    this.localFin = true;
    // Nothing can be sent once the session is gone; the peer's FIN already told everything.
    if (this.host.isGone()) cb();
    else this.host.writeData(this.id, Buffer.alloc(0), true, cb);
  }

  override _read(): void {
    this.host.unblock(this);
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    if (this.resetStatus === null && !(this.localFin && this.remoteFin) && !this.host.isGone()) {
      this.resetStatus = err === null ? RST_STATUS.cancel : RST_STATUS.internalError;
      this.host.writeRst(this.id, this.resetStatus);
    }
    this.host.forget(this);
    cb(err);
  }

  // --- called by the session ---

  receiveData(data: Buffer): void {
    if (this.destroyed) return;
    if (!this.push(data)) this.host.block(this);
  }

  receiveFin(): void {
    if (this.remoteFin) return;
    this.remoteFin = true;
    this.push(null);
  }

  receiveReset(status: number): void {
    this.resetStatus = status;
    this.destroy(status === RST_STATUS.cancel ? undefined : new SpdyStreamResetError(this.id, status));
  }

  /** The session's socket closed. */
  sessionGone(): void {
    // A stream that has all of the peer's data can still be read to its end.
    if (this.remoteFin) return;
    this.destroy(new SpdySessionClosedError(`SPDY session closed before stream ${this.id} finished`));
  }
}
