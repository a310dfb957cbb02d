// The agent link's packets over a WebSocket (RFC 6455): one binary message is
// one gRPC message body, i.e. one Packet (docs/protocol.md, "WebSocket
// transport"). This Duplex lets the packet stream (packet-stream.ts) ride on
// a WebSocket unchanged: what it writes is gRPC's length-prefixed byte
// stream, whose prefixes are taken off here, each message going out as one
// WebSocket message (a message written in pieces goes out as fragments of
// one message: the payload is never copied); what it reads is one chunk per
// message (`wholeMessages`), objects, so that no chunk is ever joined.
//
// Back-pressure both ways, as ws's own stream.js: a write completes only when
// ws has handed its frame to the socket (so `writableLength` and 'drain' are
// the WebSocket's), and a reader that stops taking messages pauses the
// WebSocket's socket until `_read` asks for more.

import { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import { GRPC_FRAME_HEADER_SIZE } from './frame.js';

/** Messages held read but not taken before the WebSocket is paused. */
const READ_HIGH_WATER_MESSAGES = 16;

export class WsMessageDuplex extends Duplex {
  /** Bytes of the message being written still to come. */
  private remaining = 0;
  /** A gRPC prefix split across writes. */
  private prefix = Buffer.alloc(GRPC_FRAME_HEADER_SIZE);
  private prefixHave = 0;
  private ws: WebSocket | undefined;

  constructor() {
    super({ readableObjectMode: true, readableHighWaterMark: READ_HIGH_WATER_MESSAGES, writableHighWaterMark: 1024 * 1024, allowHalfOpen: true });
  }

  /** Carries the stream over `ws` from now on (an accepted upgrade). Binary messages only; anything else is for the owner's 'message' listener to refuse. */
  attach(ws: WebSocket): void {
    this.ws = ws;
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (!isBinary) return;
      if (!this.push(data)) ws.pause();
    });
  }

  override _read(): void {
    if (this.ws?.isPaused === true) this.ws.resume();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.sendPieces(chunk, cb);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, cb: (err?: Error | null) => void): void {
    let open = 1;
    let failed: Error | undefined;
    const done = (err?: Error | null): void => {
      if (err) failed ??= err;
      if (--open === 0) cb(failed);
    };
    for (const { chunk } of chunks) {
      open++;
      this.sendPieces(chunk, done);
    }
    done();
  }

  override _final(cb: (err?: Error | null) => void): void {
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    this.ws = undefined;
    cb(err);
  }

  /** Sends the message bytes in `chunk` (prefixes taken off); `cb` once ws has written the last of them. */
  private sendPieces(chunk: Buffer, cb: (err?: Error | null) => void): void {
    const ws = this.ws;
    if (ws === undefined || ws.readyState !== ws.OPEN) {
      cb(new Error('the WebSocket is not open'));
      return;
    }
    let at = 0;
    let open = 1;
    let failed: Error | undefined;
    const done = (err?: Error): void => {
      if (err) failed ??= err;
      if (--open === 0) cb(failed);
    };
    while (at < chunk.length) {
      if (this.remaining === 0) {
        const take = Math.min(GRPC_FRAME_HEADER_SIZE - this.prefixHave, chunk.length - at);
        chunk.copy(this.prefix, this.prefixHave, at, at + take);
        this.prefixHave += take;
        at += take;
        if (this.prefixHave < GRPC_FRAME_HEADER_SIZE) break;
        this.prefixHave = 0;
        this.remaining = this.prefix.readUInt32BE(1);
        if (this.remaining === 0) {
          open++;
          ws.send(Buffer.alloc(0), { binary: true, fin: true, compress: false }, done);
        }
        continue;
      }
      const piece = chunk.subarray(at, at + Math.min(this.remaining, chunk.length - at));
      at += piece.length;
      this.remaining -= piece.length;
      open++;
      ws.send(piece, { binary: true, fin: this.remaining === 0, compress: false }, done);
    }
    done();
  }
}
