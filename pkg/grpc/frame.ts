// gRPC's length-prefixed message framing: 1 byte "compressed" flag, 4 bytes
// big-endian length, then the message.

import { InternalError, ProtocolError } from '../protocol/errors.js';

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
 * Where messages that span chunks are joined. `take` returns a buffer of
 * exactly `length` bytes; the message assembled in it is handed on, and with
 * it the buffer (the receiver gives it back when done, e.g. to a pool).
 * `drop` gets back a buffer whose message will never be completed.
 */
export interface MessageBuffers {
  take(length: number): Buffer;
  drop(buffer: Buffer): void;
}

/** Each join in a new Buffer of its own, left to the GC. */
export const unpooledMessageBuffers: MessageBuffers = {
  take: (length) => Buffer.allocUnsafe(length),
  drop: () => {},
};

/**
 * Splits a byte stream into gRPC messages. Chunks may be cut anywhere (HTTP/2
 * delivers 16 KiB frames). A message inside one chunk is handed on as a
 * subarray of it; one that spans chunks is copied once, piece by piece as
 * they arrive, into a buffer from `buffers` (so the chunks are not kept), and
 * handed on with `joined` true: the receiver then owns that buffer. The
 * caller must not reuse chunks it has pushed.
 */
export class GrpcDeframer {
  private readonly maxMessageSize: number;
  private readonly buffers: MessageBuffers;
  /** Bytes of a header cut by a chunk boundary. */
  private readonly header = Buffer.alloc(GRPC_FRAME_HEADER_SIZE);
  private headerLength = 0;
  /** The message being assembled across chunks, and how much of it has arrived. */
  private message: Buffer | undefined;
  private messageLength = 0;
  /** Messages that spanned chunks and were joined, and the bytes copied doing it (for the packet-path budget test). */
  joinedMessages = 0;
  copiedBytes = 0;
  private closed = false;

  constructor(maxMessageSize = DEFAULT_MAX_MESSAGE_SIZE, buffers: MessageBuffers = unpooledMessageBuffers) {
    this.maxMessageSize = maxMessageSize;
    this.buffers = buffers;
  }

  /** Bytes received but not yet returned as a message. */
  get bufferedLength(): number {
    return this.headerLength + this.messageLength;
  }

  /** Every message completed by `chunk`, in order. */
  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    this.forEach(chunk, (m) => out.push(m));
    return out;
  }

  /**
   * Calls `onMessage` for every message completed by `chunk`, in order (no
   * array on the hot path); `joined` says the message is a buffer from
   * `take`, now the receiver's, even if `onMessage` throws.
   */
  forEach(chunk: Buffer, onMessage: (message: Buffer, joined: boolean) => void): void {
    if (this.closed) throw new InternalError('bytes were pushed to a gRPC deframer after it was closed');
    let pos = 0;
    const end = chunk.length;
    while (pos < end) {
      if (this.message !== undefined) {
        // Continuing a message that began in an earlier chunk.
        const take = Math.min(this.message.length - this.messageLength, end - pos);
        chunk.copy(this.message, this.messageLength, pos, pos + take);
        this.copiedBytes += take;
        this.messageLength += take;
        pos += take;
        if (this.messageLength === this.message.length) {
          const m = this.message;
          this.message = undefined;
          this.messageLength = 0;
          onMessage(m, true);
        }
        continue;
      }
      let len: number;
      if (this.headerLength === 0 && end - pos >= GRPC_FRAME_HEADER_SIZE) {
        // Fast path: the header is whole in this chunk.
        len = this.readHeader(chunk, pos);
        pos += GRPC_FRAME_HEADER_SIZE;
      } else {
        const take = Math.min(GRPC_FRAME_HEADER_SIZE - this.headerLength, end - pos);
        chunk.copy(this.header, this.headerLength, pos, pos + take);
        this.headerLength += take;
        pos += take;
        if (this.headerLength < GRPC_FRAME_HEADER_SIZE) break;
        this.headerLength = 0;
        len = this.readHeader(this.header, 0);
      }
      if (end - pos >= len) {
        onMessage(chunk.subarray(pos, pos + len), false);
        pos += len;
        continue;
      }
      this.message = this.buffers.take(len);
      this.joinedMessages++;
    }
  }

  /** Gives back the buffer of a message still being assembled (the stream ends): nothing more may be pushed. */
  close(): void {
    const m = this.message;
    this.message = undefined;
    this.messageLength = 0;
    this.headerLength = 0;
    this.closed = true;
    if (m !== undefined) this.buffers.drop(m);
  }

  private readHeader(buf: Buffer, at: number): number {
    const flag = buf[at]!;
    const len = buf.readUInt32BE(at + 1);
    if (flag === 1) {
      throw new ProtocolError('YT_ERR_PROTOCOL_COMPRESSED', 'received a compressed gRPC message, but no compression was negotiated');
    }
    if (flag !== 0) throw new ProtocolError('YT_ERR_PROTOCOL_FRAME', `malformed gRPC frame: flag byte ${flag}`);
    if (len > this.maxMessageSize) {
      throw new ProtocolError('YT_ERR_PROTOCOL_TOO_LARGE', `gRPC message of ${len} bytes exceeds the limit of ${this.maxMessageSize} bytes`);
    }
    return len;
  }
}
