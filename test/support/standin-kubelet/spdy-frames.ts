// SPDY/3.1 frames: bytes → frames and frames → bytes. Header blocks stay
// compressed here; spdy-headers.ts deals with them.

import { ByteQueue } from './byte-queue.js';
import { SpdyProtocolError } from './errors.js';

export const SPDY_VERSION = 3;
export const FLAG_FIN = 0x01;
export const FLAG_UNIDIRECTIONAL = 0x02;

export const FRAME_TYPE = {
  synStream: 1,
  synReply: 2,
  rstStream: 3,
  settings: 4,
  ping: 6,
  goAway: 7,
  headers: 8,
  windowUpdate: 9,
} as const;

export const RST_STATUS = {
  protocolError: 1,
  invalidStream: 2,
  refusedStream: 3,
  unsupportedVersion: 4,
  cancel: 5,
  internalError: 6,
  flowControlError: 7,
  streamInUse: 8,
  streamAlreadyClosed: 9,
  frameTooLarge: 11,
} as const;

export const GOAWAY_STATUS = { ok: 0, protocolError: 1, internalError: 2 } as const;

export type SpdyFrame =
  | { type: 'DATA'; streamId: number; fin: boolean; data: Buffer }
  | { type: 'SYN_STREAM'; streamId: number; associatedId: number; priority: number; fin: boolean; unidirectional: boolean; headerBlock: Buffer }
  | { type: 'SYN_REPLY'; streamId: number; fin: boolean; headerBlock: Buffer }
  | { type: 'HEADERS'; streamId: number; fin: boolean; headerBlock: Buffer }
  | { type: 'RST_STREAM'; streamId: number; status: number }
  | { type: 'SETTINGS'; entries: Array<{ id: number; flags: number; value: number }> }
  | { type: 'PING'; id: number }
  | { type: 'GOAWAY'; lastGoodStreamId: number; status: number }
  | { type: 'WINDOW_UPDATE'; streamId: number; delta: number }
  | { type: 'UNKNOWN'; controlType: number };

const HEADER_BYTES = 8;
const STREAM_ID_MASK = 0x7fffffff;

/** Splits a byte stream into frames. Throws SpdyProtocolError on malformed input. */
export class SpdyFrameParser {
  private readonly queue = new ByteQueue();

  constructor(private readonly maxFrameBytes: number) {}

  push(chunk: Buffer): SpdyFrame[] {
    this.queue.push(chunk);
    const frames: SpdyFrame[] = [];
    while (this.queue.length >= HEADER_BYTES) {
      const length = this.queue.peek(HEADER_BYTES).readUInt32BE(4) & 0xffffff;
      if (length > this.maxFrameBytes) throw new SpdyProtocolError(`frame of ${length} bytes is over the ${this.maxFrameBytes} byte limit`);
      if (this.queue.length < HEADER_BYTES + length) break;
      frames.push(decodeFrame(this.queue.take(HEADER_BYTES + length)));
    }
    return frames;
  }
}

function decodeFrame(f: Buffer): SpdyFrame {
  const flags = f[4]!;
  const payload = f.subarray(HEADER_BYTES);
  if ((f[0]! & 0x80) === 0) {
    return { type: 'DATA', streamId: f.readUInt32BE(0) & STREAM_ID_MASK, fin: (flags & FLAG_FIN) !== 0, data: payload };
  }
  const version = f.readUInt16BE(0) & 0x7fff;
  if (version !== SPDY_VERSION) throw new SpdyProtocolError(`unsupported SPDY version ${version}`);
  const type = f.readUInt16BE(2);
  const need = (n: number, name: string): void => {
    if (payload.length < n) throw new SpdyProtocolError(`${name} frame of ${payload.length} bytes is too short`);
  };
  switch (type) {
    case FRAME_TYPE.synStream:
      need(10, 'SYN_STREAM');
      return {
        type: 'SYN_STREAM',
        streamId: payload.readUInt32BE(0) & STREAM_ID_MASK,
        associatedId: payload.readUInt32BE(4) & STREAM_ID_MASK,
        priority: payload[8]! >> 5,
        fin: (flags & FLAG_FIN) !== 0,
        unidirectional: (flags & FLAG_UNIDIRECTIONAL) !== 0,
        headerBlock: payload.subarray(10),
      };
    case FRAME_TYPE.synReply:
      need(4, 'SYN_REPLY');
      return { type: 'SYN_REPLY', streamId: payload.readUInt32BE(0) & STREAM_ID_MASK, fin: (flags & FLAG_FIN) !== 0, headerBlock: payload.subarray(4) };
    case FRAME_TYPE.headers:
      need(4, 'HEADERS');
      return { type: 'HEADERS', streamId: payload.readUInt32BE(0) & STREAM_ID_MASK, fin: (flags & FLAG_FIN) !== 0, headerBlock: payload.subarray(4) };
    case FRAME_TYPE.rstStream:
      need(8, 'RST_STREAM');
      return { type: 'RST_STREAM', streamId: payload.readUInt32BE(0) & STREAM_ID_MASK, status: payload.readUInt32BE(4) };
    case FRAME_TYPE.settings: {
      need(4, 'SETTINGS');
      const count = payload.readUInt32BE(0);
      if (payload.length !== 4 + count * 8) throw new SpdyProtocolError(`SETTINGS frame announces ${count} entries in ${payload.length} bytes`);
      const entries = [];
      for (let i = 0; i < count; i++) {
        const at = 4 + i * 8;
        entries.push({ flags: payload[at]!, id: payload.readUIntBE(at + 1, 3), value: payload.readUInt32BE(at + 4) });
      }
      return { type: 'SETTINGS', entries };
    }
    case FRAME_TYPE.ping:
      need(4, 'PING');
      return { type: 'PING', id: payload.readUInt32BE(0) };
    case FRAME_TYPE.goAway:
      need(4, 'GOAWAY');
      // SPDY/3 has a status word; accept a SPDY/2-style 4-byte body as status OK.
      return { type: 'GOAWAY', lastGoodStreamId: payload.readUInt32BE(0) & STREAM_ID_MASK, status: payload.length >= 8 ? payload.readUInt32BE(4) : 0 };
    case FRAME_TYPE.windowUpdate:
      need(8, 'WINDOW_UPDATE');
      return { type: 'WINDOW_UPDATE', streamId: payload.readUInt32BE(0) & STREAM_ID_MASK, delta: payload.readUInt32BE(4) & STREAM_ID_MASK };
    default:
      return { type: 'UNKNOWN', controlType: type };
  }
}

function controlFrame(type: number, flags: number, payload: Buffer): Buffer {
  const h = Buffer.allocUnsafe(HEADER_BYTES + payload.length);
  h.writeUInt16BE(0x8000 | SPDY_VERSION, 0);
  h.writeUInt16BE(type, 2);
  h.writeUInt32BE((((flags & 0xff) << 24) | payload.length) >>> 0, 4);
  payload.copy(h, HEADER_BYTES);
  return h;
}

function words(...values: number[]): Buffer {
  const b = Buffer.allocUnsafe(values.length * 4);
  values.forEach((v, i) => b.writeUInt32BE(v >>> 0, i * 4));
  return b;
}

export function encodeSynStream(streamId: number, headerBlock: Buffer, opts: { fin?: boolean; unidirectional?: boolean; priority?: number } = {}): Buffer {
  const flags = (opts.fin === true ? FLAG_FIN : 0) | (opts.unidirectional === true ? FLAG_UNIDIRECTIONAL : 0);
  const fixed = Buffer.alloc(10);
  fixed.writeUInt32BE(streamId, 0);
  fixed[8] = ((opts.priority ?? 0) & 0x7) << 5;
  return controlFrame(FRAME_TYPE.synStream, flags, Buffer.concat([fixed, headerBlock]));
}

export function encodeSynReply(streamId: number, headerBlock: Buffer, fin = false): Buffer {
  return controlFrame(FRAME_TYPE.synReply, fin ? FLAG_FIN : 0, Buffer.concat([words(streamId), headerBlock]));
}

export function encodeRstStream(streamId: number, status: number): Buffer {
  return controlFrame(FRAME_TYPE.rstStream, 0, words(streamId, status));
}

export function encodePing(id: number): Buffer {
  return controlFrame(FRAME_TYPE.ping, 0, words(id));
}

export function encodeGoAway(lastGoodStreamId: number, status: number): Buffer {
  return controlFrame(FRAME_TYPE.goAway, 0, words(lastGoodStreamId, status));
}

/** The 8-byte header of a DATA frame; the payload follows separately. */
export function encodeDataHeader(streamId: number, length: number, fin: boolean): Buffer {
  if (length > 0xffffff) throw new RangeError(`a DATA frame holds at most 16 MiB - 1, got ${length}`);
  const h = Buffer.allocUnsafe(HEADER_BYTES);
  h.writeUInt32BE(streamId & STREAM_ID_MASK, 0);
  h.writeUInt32BE((((fin ? FLAG_FIN : 0) << 24) | length) >>> 0, 4);
  return h;
}
