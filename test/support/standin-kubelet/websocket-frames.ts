// RFC 6455 framing: bytes → frames (a state machine that streams data
// payloads piece by piece, so a large frame is never held whole) and
// frames → bytes. No extensions.

import { createHash, randomBytes } from 'node:crypto';
import { ByteQueue } from './byte-queue.js';
import { WebSocketProtocolError } from './errors.js';

export const OPCODE = { continuation: 0, text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;
export const CLOSE_CODE = { normal: 1000, goingAway: 1001, protocolError: 1002, unsupportedData: 1003, tooBig: 1009 } as const;

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export function webSocketAccept(key: string): string {
  return createHash('sha1')
    .update(key + GUID)
    .digest('base64');
}

export interface FrameHandler {
  /**
   * A piece of a data message's payload, unmasked. `first` marks the message's
   * first piece, `last` its last one; a message may arrive in many pieces.
   */
  onData(opcode: number, piece: Buffer, first: boolean, last: boolean): void;
  /** A whole control frame (close, ping, pong). */
  onControl(opcode: number, payload: Buffer): void;
}

const enum State {
  Header,
  Length16,
  Length64,
  MaskKey,
  Payload,
}

// 2^53 - 1 bytes, the largest length a JS number holds exactly.
const MAX_LENGTH_HIGH_WORD = 0x1fffff;

export class FrameParser {
  private readonly queue = new ByteQueue();
  private state = State.Header;
  private fin = false;
  private opcode = 0;
  private masked = false;
  private remaining = 0;
  private mask: Buffer | null = null;
  private maskOffset = 0;
  /** Opcode of the data message in progress, or -1. */
  private messageOpcode = -1;
  private messageStarted = false;

  /** `expectMasked`: true on a server (client frames must be masked), false on a client. */
  constructor(
    private readonly expectMasked: boolean,
    private readonly handler: FrameHandler,
  ) {}

  /** Feeds bytes; throws WebSocketProtocolError on a malformed stream. */
  write(chunk: Buffer): void {
    this.queue.push(chunk);
    for (;;) {
      switch (this.state) {
        case State.Header:
          if (this.queue.length < 2) return;
          this.readHeader(this.queue.take(2));
          break;
        case State.Length16:
          if (this.queue.length < 2) return;
          this.remaining = this.queue.take(2).readUInt16BE(0);
          this.afterLength();
          break;
        case State.Length64: {
          if (this.queue.length < 8) return;
          const b = this.queue.take(8);
          const high = b.readUInt32BE(0);
          if (high > MAX_LENGTH_HIGH_WORD) throw new WebSocketProtocolError('frame length exceeds 2^53 - 1', 1009);
          this.remaining = high * 2 ** 32 + b.readUInt32BE(4);
          this.afterLength();
          break;
        }
        case State.MaskKey:
          if (this.queue.length < 4) return;
          this.mask = Buffer.from(this.queue.take(4));
          this.maskOffset = 0;
          this.state = State.Payload;
          this.startPayload();
          break;
        case State.Payload:
          if (!this.readPayload()) return;
          break;
      }
    }
  }

  private readHeader(h: Buffer): void {
    const b0 = h[0]!;
    const b1 = h[1]!;
    this.fin = (b0 & 0x80) !== 0;
    this.opcode = b0 & 0x0f;
    this.masked = (b1 & 0x80) !== 0;
    this.remaining = b1 & 0x7f;
    if ((b0 & 0x70) !== 0) throw new WebSocketProtocolError('RSV bits set without a negotiated extension', 1002);
    if (this.masked !== this.expectMasked) {
      throw new WebSocketProtocolError(this.expectMasked ? 'client frame is not masked' : 'server frame is masked', 1002);
    }
    const control = this.opcode >= 8;
    if (control) {
      if (this.opcode > OPCODE.pong) throw new WebSocketProtocolError(`reserved opcode ${this.opcode}`, 1002);
      if (!this.fin) throw new WebSocketProtocolError('fragmented control frame', 1002);
      if (this.remaining > 125) throw new WebSocketProtocolError('control frame payload over 125 bytes', 1002);
    } else if (this.opcode === OPCODE.continuation) {
      if (this.messageOpcode < 0) throw new WebSocketProtocolError('continuation frame without a message in progress', 1002);
    } else if (this.opcode === OPCODE.text || this.opcode === OPCODE.binary) {
      if (this.messageOpcode >= 0) throw new WebSocketProtocolError('new data frame inside a fragmented message', 1002);
      this.messageOpcode = this.opcode;
      this.messageStarted = false;
    } else {
      throw new WebSocketProtocolError(`reserved opcode ${this.opcode}`, 1002);
    }
    if (this.remaining === 126) this.state = State.Length16;
    else if (this.remaining === 127) this.state = State.Length64;
    else this.afterLength();
  }

  private afterLength(): void {
    if (this.masked) {
      this.state = State.MaskKey;
      return;
    }
    this.mask = null;
    this.state = State.Payload;
    this.startPayload();
  }

  // A data frame with no payload still has to report message boundaries.
  private startPayload(): void {
    if (this.remaining === 0 && this.opcode < 8) this.deliverData(Buffer.alloc(0));
  }

  /** Returns false when it needs more bytes. */
  private readPayload(): boolean {
    if (this.opcode >= 8) {
      if (this.queue.length < this.remaining) return false;
      const payload = Buffer.from(this.queue.take(this.remaining));
      this.unmask(payload);
      this.remaining = 0;
      this.state = State.Header;
      this.handler.onControl(this.opcode, payload);
      return true;
    }
    if (this.remaining === 0) {
      this.state = State.Header;
      return true;
    }
    if (this.queue.length === 0) return false;
    const n = Math.min(this.queue.headLength, this.remaining);
    const piece = this.queue.take(n);
    this.unmask(piece);
    this.remaining -= n;
    if (this.remaining === 0) this.state = State.Header;
    this.deliverData(piece);
    return true;
  }

  private deliverData(piece: Buffer): void {
    const first = !this.messageStarted;
    const last = this.fin && this.remaining === 0;
    this.messageStarted = true;
    const opcode = this.messageOpcode;
    if (last) this.messageOpcode = -1;
    if (piece.length > 0 || first || last) this.handler.onData(opcode, piece, first, last);
  }

  private unmask(buf: Buffer): void {
    const mask = this.mask;
    if (mask === null) return;
    let m = this.maskOffset;
    for (let i = 0; i < buf.length; i++, m = (m + 1) & 3) buf[i] = buf[i]! ^ mask[m]!;
    this.maskOffset = m;
  }
}

/** A frame header; with `maskKey` the mask bit is set and the key appended. */
export function frameHeader(opcode: number, length: number, fin = true, maskKey?: Buffer): Buffer {
  const maskBytes = maskKey === undefined ? 0 : 4;
  const lenBytes = length < 126 ? 0 : length < 65536 ? 2 : 8;
  const h = Buffer.allocUnsafe(2 + lenBytes + maskBytes);
  h[0] = (fin ? 0x80 : 0) | opcode;
  const maskBit = maskKey === undefined ? 0 : 0x80;
  if (lenBytes === 0) {
    h[1] = maskBit | length;
  } else if (lenBytes === 2) {
    h[1] = maskBit | 126;
    h.writeUInt16BE(length, 2);
  } else {
    h[1] = maskBit | 127;
    h.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    h.writeUInt32BE(length >>> 0, 6);
  }
  if (maskKey !== undefined) maskKey.copy(h, 2 + lenBytes);
  return h;
}

/** One complete masked frame, as a client sends it. */
export function maskedFrame(opcode: number, payload: Buffer, fin = true): Buffer {
  const key = randomBytes(4);
  const header = frameHeader(opcode, payload.length, fin, key);
  const out = Buffer.allocUnsafe(header.length + payload.length);
  header.copy(out, 0);
  for (let i = 0; i < payload.length; i++) out[header.length + i] = payload[i]! ^ key[i & 3]!;
  return out;
}

/** A close frame payload: code and an optional reason. */
export function closePayload(code: number, reason = ''): Buffer {
  const r = Buffer.from(reason);
  const out = Buffer.allocUnsafe(2 + r.length);
  out.writeUInt16BE(code, 0);
  r.copy(out, 2);
  return out;
}

/** Reads a close frame payload; code 1005 when it has none. */
export function parseClosePayload(payload: Buffer): { code: number; reason: string } {
  if (payload.length < 2) return { code: 1005, reason: '' };
  return { code: payload.readUInt16BE(0), reason: payload.subarray(2).toString() };
}
