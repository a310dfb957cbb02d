// The server's side of a streaming gRPC call carrying packets (an agent's
// `AgentService/Connect`): the shared packet framing plus what a gRPC server
// owes its client, the call's status in the trailers.

import { constants, type ServerHttp2Stream } from 'node:http2';
import { GrpcPacketStream, type GrpcPacketStreamHandlers, type GrpcPacketStreamOptions } from './packet-stream.js';
import { GrpcStatus, statusTrailers } from './status.js';
import type { ProtocolError } from '../protocol/errors.js';

export class ServerPacketCall extends GrpcPacketStream {
  private status: { code: number; message: string } | undefined;
  /** After the trailers, reset the stream so the peer stops sending (we stopped reading). */
  private resetAfterTrailers = false;

  constructor(
    private readonly serverStream: ServerHttp2Stream,
    opts: GrpcPacketStreamOptions = {},
  ) {
    super(serverStream, opts);
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    const stream = this.serverStream;
    stream.on('wantTrailers', () => {
      const s = this.status ?? { code: GrpcStatus.OK, message: '' };
      stream.sendTrailers(statusTrailers(s.code, s.message));
      this.writeTracker?.headersSent();
      // RST_STREAM NO_ERROR after a complete response tells the client to stop sending (RFC 9113 §8.1).
      // (On the next turn: a reset in the same turn would drop the trailers.)
      if (this.resetAfterTrailers) setImmediate(() => stream.close(constants.NGHTTP2_NO_ERROR));
    });
    // The agent half-closed: the call is over; answer with OK.
    stream.on('end', () => this.end(GrpcStatus.OK, '', 'agent ended the stream'));
    stream.on('close', () => this.finish(this.closeReason()));
    stream.on('error', () => {
      // 'close' follows and reports; closeReason() says what happened.
    });
  }

  /** The status the call ended with, once it has one (a call that broke has none). */
  get endStatus(): { readonly code: number; readonly message: string } | undefined {
    return this.status;
  }

  private closeReason(): string {
    const code = this.serverStream.rstCode;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when the stream closed without a reset, whatever @types/node says
    if (code !== undefined && code !== 0) return `stream reset (HTTP/2 error code ${code})`;
    return this.serverStream.session?.destroyed ? 'connection closed' : 'stream closed';
  }

  /**
   * What follows a malformed or oversized message cannot be read as messages:
   * stop reading at once (no more window for the peer), end with a status,
   * and reset the stream.
   */
  protected onProtocolError(err: ProtocolError): void {
    this.stopReading();
    this.resetAfterTrailers = true;
    this.end(err.code === 'YT_ERR_PROTOCOL_TOO_LARGE' ? GrpcStatus.RESOURCE_EXHAUSTED : GrpcStatus.INTERNAL, err.message);
  }

  /** A peer that does not read cannot take a status either: reset the stream at once. */
  protected onOverloaded(message: string): void {
    this.finish(message);
    this.stopReading();
    if (!this.serverStream.destroyed && !this.serverStream.closed) this.serverStream.close(constants.NGHTTP2_ENHANCE_YOUR_CALM);
  }

  protected onInternalError(message: string): void {
    this.resetAfterTrailers = true;
    this.end(GrpcStatus.INTERNAL, message);
  }

  /** Runs `cb` once the HTTP/2 stream is closed (at once if it is). */
  onceClosed(cb: () => void): void {
    if (this.serverStream.closed || this.serverStream.destroyed) cb();
    else this.serverStream.once('close', cb);
  }

  /** Drops the call without a status (the connection is dead), for `reason`. */
  abort(reason: string): void {
    this.finish(reason);
    if (!this.serverStream.destroyed) this.serverStream.destroy();
  }

  /**
   * Ends the call of a peer we stop listening to: nothing more is read (no
   * more window for it), the status goes out in the trailers, then a reset.
   */
  cutOff(code: number, message: string): void {
    this.stopReading();
    this.resetAfterTrailers = true;
    this.end(code, message);
  }

  /** Ends the call with a gRPC status (sent in the trailers). */
  end(code: number, message: string, reason = message === '' ? `ended with gRPC status ${code}` : message): void {
    if (this.isEnded) return;
    this.status = { code, message };
    this.finish(reason);
    const stream = this.serverStream;
    if (!stream.closed && !stream.destroyed) {
      if (!this.resetAfterTrailers) stream.resume();
      stream.end();
      // A peer that never reads its trailers must not hold the stream.
      const timer = setTimeout(() => stream.close(), 5000);
      timer.unref();
      stream.once('close', () => clearTimeout(timer));
    }
  }
}
