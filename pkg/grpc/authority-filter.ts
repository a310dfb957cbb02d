// kube-apiserver (grpc-go) dials its egress socket with `:authority` set to
// the socket's path, and nghttp2 — so node:http2 — refuses a `/` there with
// a stream error before any handler runs. This filter sits between the
// accepted socket and the HTTP/2 server: it passes every frame through,
// except that it decodes each HEADERS block (with CONTINUATIONs) and writes
// it again as literals without indexing, with an `:authority` HTTP/2 would
// refuse replaced by `localhost`. Our decoder follows the client's table; the
// server's stays empty, so both stay consistent.
//
// It reads incrementally (preface → 9-byte frame header → payload; short of
// bytes, it returns and waits) and never looks at a byte twice. Frames other
// than HEADERS/CONTINUATION are handed on as their bytes arrive; only a
// header block is held, up to the header list size the server announced.
// So a client trickling a huge frame costs neither memory nor CPU: a frame
// longer than the announced SETTINGS_MAX_FRAME_SIZE is refused at its header.

import { constants as h2 } from 'node:http2';
import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { HpackError, Http2FrameError } from './errors.js';
import { encodeHeaderBlock, HpackDecoder, type HeaderField } from './hpack/hpack.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER = 9;
const TYPE_HEADERS = 0x1;
const TYPE_GOAWAY = 0x7;
const TYPE_CONTINUATION = 0x9;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
/** HTTP/2's initial SETTINGS_MAX_FRAME_SIZE, and the most a frame may declare (RFC 9113 §6.5.2). */
const DEFAULT_MAX_FRAME = 16_384;
const LARGEST_FRAME = 2 ** 24 - 1;
/** What nghttp2 accepts in `:authority` (RFC 3986 authority characters). */
const VALID_AUTHORITY = /^[A-Za-z0-9\-._~!$&'()*+,;=:%[\]@]*$/;
export const REPLACEMENT_AUTHORITY = 'localhost';
/** After a GOAWAY, how long a client gets to close before its socket is destroyed. */
const REFUSED_CLOSE_GRACE_MS = 1000;

/** What the HTTP/2 server behind the filter announces in its SETTINGS; the filter holds clients to the same. */
export interface AuthorityFilterLimits {
  /** SETTINGS_MAX_FRAME_SIZE: a longer frame is refused at its header (FRAME_SIZE_ERROR). Default 16 384. */
  maxFrameSize?: number;
  /**
   * SETTINGS_MAX_HEADER_LIST_SIZE: a header block (compressed, over its CONTINUATIONs) or the list it decodes to
   * beyond this is refused (COMPRESSION_ERROR, as RFC 9113 §4.3 asks of a block left undecoded). Default 65 535,
   * node:http2's.
   */
  maxHeaderListSize?: number;
}

// The parser's states, as ws's receiver numbers them.
const PREFACE_BYTES = 0;
const FRAME_HEAD = 1;
const PASS_PAYLOAD = 2;
const HEADER_PAYLOAD = 3;
/** Not HTTP/2: everything goes on unchanged, for the server to answer as it does to garbage. */
const NOT_HTTP2 = 4;
/** Refused or released: input is dropped. */
const DONE = 5;

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const out = Buffer.alloc(FRAME_HEADER + payload.length);
  out.writeUIntBE(payload.length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId & 0x7fffffff, 5);
  payload.copy(out, FRAME_HEADER);
  return out;
}

/** A GOAWAY naming the last stream the server may have seen, with the reason as its debug data. */
export function goawayFrame(lastStreamId: number, http2Code: number, reason: string): Buffer {
  const payload = Buffer.alloc(8);
  payload.writeUInt32BE(lastStreamId & 0x7fffffff, 0);
  payload.writeUInt32BE(http2Code, 4);
  return frame(TYPE_GOAWAY, 0, 0, Buffer.concat([payload, Buffer.from(reason.slice(0, 256), 'latin1')]));
}

/** The HEADERS or CONTINUATION frame being read: its payload is filled as bytes arrive. */
interface HeaderFrame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
  filled: number;
}

/** A header block waiting for its END_HEADERS. */
interface HeaderBlock {
  streamId: number;
  /** The HEADERS frame's flags (END_STREAM is kept). */
  flags: number;
  fragments: Buffer[];
  /** Bytes of header block so far (what the cap counts). */
  size: number;
  /** Bytes of frame payload behind the fragments (padding included). */
  held: number;
}

/** Rewrites client-to-server HTTP/2 bytes; see the file comment. */
export class AuthorityRewriter {
  private readonly decoder = new HpackDecoder();
  private readonly maxFrameSize: number;
  private readonly maxHeaderListSize: number;
  private state = PREFACE_BYTES;
  private prefaceMatched = 0;
  /** A frame header cut between chunks. */
  private readonly head = Buffer.alloc(FRAME_HEADER);
  private headFilled = 0;
  /** Payload bytes of a passed-through frame still to come. */
  private passRemaining = 0;
  private frame: HeaderFrame | undefined;
  private block: HeaderBlock | undefined;
  /** The highest stream whose headers went on to the server (a GOAWAY names it). */
  lastStreamId = 0;
  /** How many `:authority` values were replaced (for logs and tests). */
  rewritten = 0;

  constructor(limits: AuthorityFilterLimits = {}) {
    this.maxFrameSize = limits.maxFrameSize ?? DEFAULT_MAX_FRAME;
    this.maxHeaderListSize = limits.maxHeaderListSize ?? 65_535;
    if (!Number.isInteger(this.maxFrameSize) || this.maxFrameSize < DEFAULT_MAX_FRAME || this.maxFrameSize > LARGEST_FRAME) {
      throw new TypeError(`maxFrameSize must be an integer from ${DEFAULT_MAX_FRAME} to ${LARGEST_FRAME}, not ${this.maxFrameSize}`);
    }
    if (!Number.isInteger(this.maxHeaderListSize) || this.maxHeaderListSize < 1) {
      throw new TypeError(`maxHeaderListSize must be a positive integer, not ${this.maxHeaderListSize}`);
    }
  }

  /** Bytes the filter holds for this connection now (a cut frame header, a header block being read). */
  get bufferedBytes(): number {
    return this.headFilled + (this.frame?.payload.length ?? 0) + (this.block?.held ?? 0);
  }

  /**
   * Bytes from the client; returns the bytes to hand to the server, in order (pieces of `chunk` where it passes
   * unchanged). Throws Http2FrameError or HpackError; after that, or after release(), input is dropped.
   */
  push(chunk: Buffer): Buffer[] {
    try {
      return this.parse(chunk);
    } catch (err: unknown) {
      this.release();
      throw err;
    }
  }

  /** Drops what is held; later input is ignored. */
  release(): void {
    this.state = DONE;
    this.frame = undefined;
    this.block = undefined;
    this.headFilled = 0;
  }

  private parse(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let pos = 0;
    // chunk[runStart, pos) goes on unchanged; it is handed on before anything the filter writes itself.
    let runStart = 0;
    const flush = (): void => {
      if (pos > runStart) out.push(chunk.subarray(runStart, pos));
      runStart = pos;
    };
    while (pos < chunk.length) {
      switch (this.state) {
        case PREFACE_BYTES: {
          const n = Math.min(chunk.length - pos, PREFACE.length - this.prefaceMatched);
          if (!chunk.subarray(pos, pos + n).equals(PREFACE.subarray(this.prefaceMatched, this.prefaceMatched + n))) {
            if (this.prefaceMatched > 0) out.push(Buffer.from(PREFACE.subarray(0, this.prefaceMatched)));
            this.state = NOT_HTTP2;
            break;
          }
          pos += n;
          runStart = pos;
          this.prefaceMatched += n;
          if (this.prefaceMatched === PREFACE.length) {
            out.push(Buffer.from(PREFACE));
            this.state = FRAME_HEAD;
          }
          break;
        }
        case NOT_HTTP2:
          pos = chunk.length;
          break;
        case DONE:
          return [];
        case FRAME_HEAD:
          if (this.headFilled === 0 && chunk.length - pos >= FRAME_HEADER) {
            const passes = this.beginFrame(chunk.subarray(pos, pos + FRAME_HEADER));
            if (!passes) flush();
            pos += FRAME_HEADER;
            if (!passes) runStart = pos;
          } else {
            flush();
            const n = Math.min(FRAME_HEADER - this.headFilled, chunk.length - pos);
            chunk.copy(this.head, this.headFilled, pos, pos + n);
            this.headFilled += n;
            pos += n;
            runStart = pos;
            if (this.headFilled === FRAME_HEADER) {
              this.headFilled = 0;
              if (this.beginFrame(this.head)) out.push(Buffer.from(this.head));
            }
          }
          if (this.frame?.payload.length === 0) this.endHeaderFrame(out);
          break;
        case PASS_PAYLOAD: {
          const n = Math.min(this.passRemaining, chunk.length - pos);
          pos += n;
          this.passRemaining -= n;
          if (this.passRemaining === 0) this.state = FRAME_HEAD;
          break;
        }
        case HEADER_PAYLOAD: {
          const f = this.frame!;
          const n = Math.min(f.payload.length - f.filled, chunk.length - pos);
          chunk.copy(f.payload, f.filled, pos, pos + n);
          f.filled += n;
          pos += n;
          runStart = pos;
          if (f.filled === f.payload.length) this.endHeaderFrame(out);
          break;
        }
      }
    }
    flush();
    return out;
  }

  /** A whole frame header: checks it and sets the state for its payload; true when the frame passes unchanged. */
  private beginFrame(header: Buffer): boolean {
    const length = header.readUIntBE(0, 3);
    const type = header[3]!;
    const flags = header[4]!;
    const streamId = header.readUInt32BE(5) & 0x7fffffff;
    if (length > this.maxFrameSize) {
      this.fail(
        `a frame of type ${type} on stream ${streamId} declares ${length} bytes, more than the SETTINGS_MAX_FRAME_SIZE of ${this.maxFrameSize}`,
        h2.NGHTTP2_FRAME_SIZE_ERROR,
      );
    }
    if (this.block !== undefined) {
      if (type !== TYPE_CONTINUATION || streamId !== this.block.streamId) {
        this.fail(
          `the header block of stream ${this.block.streamId} was interrupted by a frame of type ${type} on stream ${streamId}`,
          h2.NGHTTP2_PROTOCOL_ERROR,
        );
      }
      if (this.block.size + length > this.maxHeaderListSize) this.failTooLarge(this.block.streamId);
    } else if (type === TYPE_CONTINUATION) {
      this.fail(`a CONTINUATION on stream ${streamId} follows no HEADERS frame`, h2.NGHTTP2_PROTOCOL_ERROR);
    }
    if (type !== TYPE_HEADERS && type !== TYPE_CONTINUATION) {
      this.passRemaining = length;
      this.state = length > 0 ? PASS_PAYLOAD : FRAME_HEAD;
      return true;
    }
    this.frame = { type, flags, streamId, payload: Buffer.allocUnsafe(length), filled: 0 };
    this.state = HEADER_PAYLOAD;
    return false;
  }

  /** The HEADERS or CONTINUATION frame is complete: adds its fragment; at END_HEADERS writes the block again. */
  private endHeaderFrame(out: Buffer[]): void {
    const { type, flags, streamId, payload } = this.frame!;
    this.frame = undefined;
    this.state = FRAME_HEAD;
    let fragment = payload;
    if (type === TYPE_HEADERS) {
      let pos = 0;
      let padding = 0;
      if ((flags & FLAG_PADDED) !== 0) {
        if (payload.length < 1) this.fail(`a padded HEADERS frame on stream ${streamId} has no pad length`, h2.NGHTTP2_PROTOCOL_ERROR);
        padding = payload[0]!;
        pos = 1;
      }
      if ((flags & FLAG_PRIORITY) !== 0) pos += 5;
      if (pos + padding > payload.length) this.fail(`the padding of a HEADERS frame on stream ${streamId} exceeds its payload`, h2.NGHTTP2_PROTOCOL_ERROR);
      fragment = payload.subarray(pos, payload.length - padding);
      this.block = { streamId, flags, fragments: [], size: 0, held: 0 };
    }
    const block = this.block!;
    block.fragments.push(fragment);
    block.size += fragment.length;
    block.held += payload.length;
    if (block.size > this.maxHeaderListSize) this.failTooLarge(streamId);
    if ((flags & FLAG_END_HEADERS) === 0) return;
    this.block = undefined;
    const bytes = block.fragments.length === 1 ? fragment : Buffer.concat(block.fragments, block.size);
    out.push(this.headers(streamId, block.flags, bytes));
  }

  private headers(streamId: number, flags: number, block: Buffer): Buffer {
    const fields: HeaderField[] = this.decoder.decode(block, this.maxHeaderListSize).map((f) => {
      if (f.name !== ':authority' || VALID_AUTHORITY.test(f.value)) return f;
      this.rewritten++;
      return { ...f, value: REPLACEMENT_AUTHORITY };
    });
    this.lastStreamId = Math.max(this.lastStreamId, streamId);
    const encoded = encodeHeaderBlock(fields);
    const frames: Buffer[] = [];
    // Pieces within HTTP/2's default frame size, which every server accepts.
    for (let pos = 0; pos === 0 || pos < encoded.length; pos += DEFAULT_MAX_FRAME) {
      const piece = encoded.subarray(pos, pos + DEFAULT_MAX_FRAME);
      const endHeaders = pos + DEFAULT_MAX_FRAME >= encoded.length ? FLAG_END_HEADERS : 0;
      if (pos === 0) frames.push(frame(TYPE_HEADERS, (flags & FLAG_END_STREAM) | endHeaders, streamId, piece));
      else frames.push(frame(TYPE_CONTINUATION, endHeaders, streamId, piece));
    }
    return frames.length === 1 ? frames[0]! : Buffer.concat(frames);
  }

  private failTooLarge(streamId: number): never {
    this.fail(
      `the header block of stream ${streamId} is larger than the SETTINGS_MAX_HEADER_LIST_SIZE of ${this.maxHeaderListSize} bytes`,
      h2.NGHTTP2_COMPRESSION_ERROR,
    );
  }

  private fail(message: string, http2Code: number): never {
    throw new Http2FrameError(message, { http2Code });
  }
}

/**
 * The socket as the HTTP/2 server should see it: what the client sends goes
 * through an AuthorityRewriter; what the server writes goes out unchanged.
 * Input the filter refuses ends the connection with a GOAWAY naming why
 * (`onError` is told too); the socket is closed gracefully, destroyed if the
 * client does not close within a second.
 */
export function withAuthorityRewrite(socket: Socket, limits: AuthorityFilterLimits, onError: (err: Error) => void): Duplex {
  const rewriter = new AuthorityRewriter(limits);
  let closeTimer: NodeJS.Timeout | undefined;
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      if (socket.destroyed || socket.writableEnded) {
        cb();
        return;
      }
      if (socket.write(chunk)) cb();
      else socket.once('drain', () => cb());
    },
    final(cb) {
      socket.end();
      cb();
    },
    destroy(err, cb) {
      socket.destroy();
      cb(err);
    },
  });
  const refuse = (err: Http2FrameError | HpackError): void => {
    onError(err);
    // What the client sends from now on is read and dropped, so that its close is seen.
    socket.resume();
    closeTimer = setTimeout(() => socket.destroy(), REFUSED_CLOSE_GRACE_MS);
    closeTimer.unref();
    const code = err instanceof Http2FrameError ? err.http2Code : h2.NGHTTP2_COMPRESSION_ERROR;
    if (duplex.writableEnded || duplex.destroyed) {
      socket.destroy();
      return;
    }
    // Through the duplex, so it follows the server's frames already queued there, never inside one.
    duplex.write(goawayFrame(rewriter.lastStreamId, code, err.message), () => socket.end());
  };
  socket.on('data', (chunk: Buffer) => {
    let out: Buffer[];
    try {
      out = rewriter.push(chunk);
    } catch (err: unknown) {
      if (err instanceof Http2FrameError || err instanceof HpackError) {
        refuse(err);
        return;
      }
      throw err;
    }
    for (const piece of out) {
      if (!duplex.push(piece)) socket.pause();
    }
  });
  socket.once('end', () => duplex.push(null));
  socket.once('close', () => {
    clearTimeout(closeTimer);
    rewriter.release();
    duplex.destroy();
  });
  socket.on('error', () => {
    // 'close' follows; the HTTP/2 session sees the end.
  });
  return duplex;
}
