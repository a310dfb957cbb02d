// gRPC's length-prefixed message framing: 1 byte "compressed" flag, 4 bytes
// big-endian length, then the message.

import { ProtocolError } from '../protocol/errors.js';

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
 * Splits a byte stream into gRPC messages. Chunks may be cut anywhere (HTTP/2
 * delivers 16 KiB frames). A message inside one chunk is returned as a
 * subarray of it; one that spans chunks is copied once, when complete. The
 * caller must not reuse chunks it has pushed.
 */
export class GrpcDeframer {
  private readonly maxMessageSize: number;
  /** Bytes of an incomplete header or message, in arrival order. */
  private pending: Buffer[] = [];
  private pendingLength = 0;
  /** Length of the message being collected, once its header is known; -1 before. */
  private wanted = -1;

  constructor(maxMessageSize = DEFAULT_MAX_MESSAGE_SIZE) {
    this.maxMessageSize = maxMessageSize;
  }

  /** Bytes received but not yet returned as a message. */
  get bufferedLength(): number {
    return this.pendingLength;
  }

  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let pos = 0;
    while (pos < chunk.length) {
      if (this.pendingLength === 0 && this.wanted < 0) {
        // Fast path: parse straight out of the chunk.
        if (chunk.length - pos < GRPC_FRAME_HEADER_SIZE) {
          this.keep(chunk.subarray(pos));
          break;
        }
        const len = this.readHeader(chunk, pos);
        const start = pos + GRPC_FRAME_HEADER_SIZE;
        if (chunk.length - start >= len) {
          out.push(chunk.subarray(start, start + len));
          pos = start + len;
          continue;
        }
        this.wanted = len;
        this.keep(chunk.subarray(start));
        break;
      }
      // Continuing a header or a message that began in an earlier chunk.
      if (this.wanted < 0) {
        const need = GRPC_FRAME_HEADER_SIZE - this.pendingLength;
        const take = Math.min(need, chunk.length - pos);
        this.keep(chunk.subarray(pos, pos + take));
        pos += take;
        if (this.pendingLength < GRPC_FRAME_HEADER_SIZE) break;
        const header = Buffer.concat(this.pending, GRPC_FRAME_HEADER_SIZE);
        this.pending = [];
        this.pendingLength = 0;
        this.wanted = this.readHeader(header, 0);
        if (this.wanted === 0) {
          out.push(Buffer.alloc(0));
          this.wanted = -1;
        }
        continue;
      }
      const take = Math.min(this.wanted - this.pendingLength, chunk.length - pos);
      this.keep(chunk.subarray(pos, pos + take));
      pos += take;
      if (this.pendingLength === this.wanted) {
        out.push(this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.wanted));
        this.pending = [];
        this.pendingLength = 0;
        this.wanted = -1;
      }
    }
    return out;
  }

  private keep(part: Buffer): void {
    if (part.length === 0) return;
    this.pending.push(part);
    this.pendingLength += part.length;
  }

  private readHeader(buf: Buffer, at: number): number {
    const flag = buf[at]!;
    const len = buf.readUInt32BE(at + 1);
    if (flag === 1) {
      throw new ProtocolError('YT_ERR_PROTOCOL_COMPRESSED', 'received a compressed gRPC message, but no compression was negotiated');
    }
    if (flag !== 0) throw new ProtocolError('YT_ERR_PROTOCOL_FRAME', `malformed gRPC frame: flag byte ${flag}`);
    if (len > this.maxMessageSize) {
      throw new ProtocolError(
        'YT_ERR_PROTOCOL_TOO_LARGE',
        `gRPC message of ${len} bytes exceeds the limit of ${this.maxMessageSize} bytes`,
      );
    }
    return len;
  }
}
