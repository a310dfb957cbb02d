// gRPC's length-prefixed message framing: 1 byte "compressed" flag, 4 bytes
// big-endian length, then the message.

import { ProtocolError } from './errors.js';

export const GRPC_FRAME_HEADER_SIZE = 5;

/** Go's default maximum receive message size. */
export const DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024;

export function grpcFrameHeader(messageLength: number): Buffer {
  return writeGrpcFrameHeader(Buffer.allocUnsafe(GRPC_FRAME_HEADER_SIZE), messageLength);
}

/** Writes the 5-byte prefix at the start of `buf` (which has room for it). */
export function writeGrpcFrameHeader(buf: Buffer, messageLength: number): Buffer {
  buf[0] = 0;
  buf.writeUInt32BE(messageLength, 1);
  return buf;
}

/**
 * Splits a byte stream into gRPC messages. Chunks may be cut anywhere.
 * Messages that lie inside one chunk are returned as subarrays of it (no
 * copy); the caller must not reuse chunks it has pushed.
 */
export class GrpcDeframer {
  private readonly maxMessageSize: number;
  private pending: Buffer[] = [];
  private pendingLength = 0;

  constructor(maxMessageSize = DEFAULT_MAX_MESSAGE_SIZE) {
    this.maxMessageSize = maxMessageSize;
  }

  /** Bytes received but not yet returned as a message. */
  get bufferedLength(): number {
    return this.pendingLength;
  }

  push(chunk: Buffer): Buffer[] {
    let buf: Buffer;
    if (this.pendingLength === 0) {
      buf = chunk;
    } else {
      this.pending.push(chunk);
      buf = Buffer.concat(this.pending, this.pendingLength + chunk.length);
      this.pending = [];
      this.pendingLength = 0;
    }
    const out: Buffer[] = [];
    let pos = 0;
    while (buf.length - pos >= GRPC_FRAME_HEADER_SIZE) {
      const flag = buf[pos]!;
      const len = buf.readUInt32BE(pos + 1);
      if (flag === 1) {
        throw new ProtocolError('YT_ERR_PROTOCOL_COMPRESSED', 'received a compressed gRPC message, but no compression was negotiated');
      }
      if (flag !== 0) {
        throw new ProtocolError('YT_ERR_PROTOCOL_FRAME', `malformed gRPC frame: flag byte ${flag}`);
      }
      if (len > this.maxMessageSize) {
        throw new ProtocolError(
          'YT_ERR_PROTOCOL_TOO_LARGE',
          `gRPC message of ${len} bytes exceeds the limit of ${this.maxMessageSize} bytes`,
        );
      }
      if (buf.length - pos - GRPC_FRAME_HEADER_SIZE < len) break;
      const start = pos + GRPC_FRAME_HEADER_SIZE;
      out.push(buf.subarray(start, start + len));
      pos = start + len;
    }
    if (pos < buf.length) {
      const rest = buf.subarray(pos);
      this.pending.push(rest);
      this.pendingLength = rest.length;
    }
    return out;
  }
}
