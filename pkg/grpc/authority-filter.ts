// kube-apiserver (grpc-go) dials its egress socket with `:authority` set to
// the socket's path, and nghttp2 — so node:http2 — refuses a `/` there with
// a stream error before any handler runs. This filter sits between the
// accepted socket and the HTTP/2 server: it passes every frame through,
// except that it decodes each HEADERS block (with CONTINUATIONs) and writes
// it again as literals without indexing, with an `:authority` HTTP/2 would
// refuse replaced by `localhost`. Our decoder follows the client's table; the
// server's stays empty, so both stay consistent.

import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { HpackError, Http2FrameError } from '../protocol/errors.js';
import { encodeHeaderBlock, HpackDecoder, type HeaderField } from './hpack/hpack.js';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
const FRAME_HEADER = 9;
const TYPE_HEADERS = 0x1;
const TYPE_CONTINUATION = 0x9;
const FLAG_END_STREAM = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;
/** Frames we write stay within HTTP/2's default SETTINGS_MAX_FRAME_SIZE. */
const MAX_FRAME = 16_384;
/** The largest header block (with its CONTINUATIONs) accepted from a client. */
const MAX_HEADER_BLOCK = 64 * 1024;
/** The largest frame read (2^24 - 1 is HTTP/2's limit; larger than the server allows is its error to report). */
const MAX_FRAME_READ = 16 * 1024 * 1024;
/** What nghttp2 accepts in `:authority` (RFC 3986 authority characters). */
const VALID_AUTHORITY = /^[A-Za-z0-9\-._~!$&'()*+,;=:%[\]@]*$/;
export const REPLACEMENT_AUTHORITY = 'localhost';

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(FRAME_HEADER);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

/** Rewrites client-to-server HTTP/2 bytes; see the file comment. */
export class AuthorityRewriter {
  private readonly decoder = new HpackDecoder();
  private buffered: Buffer = Buffer.alloc(0);
  private prefaceSeen = false;
  private pending: { streamId: number; flags: number; fragments: Buffer[]; size: number } | undefined;
  /** How many `:authority` values were replaced (for logs and tests). */
  rewritten = 0;

  /** Bytes from the client; returns the bytes to hand to the server. Throws Http2FrameError or HpackError. */
  push(chunk: Buffer): Buffer[] {
    this.buffered = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    const out: Buffer[] = [];
    if (!this.prefaceSeen) {
      const n = Math.min(this.buffered.length, PREFACE.length);
      if (!this.buffered.subarray(0, n).equals(PREFACE.subarray(0, n))) {
        // Not HTTP/2: hand it on unchanged, and let the server answer as it does to garbage.
        this.prefaceSeen = true;
        this.passThrough = true;
      } else if (this.buffered.length < PREFACE.length) {
        return out;
      } else {
        this.prefaceSeen = true;
        out.push(this.buffered.subarray(0, PREFACE.length));
        this.buffered = this.buffered.subarray(PREFACE.length);
      }
    }
    if (this.passThrough) {
      out.push(this.buffered);
      this.buffered = Buffer.alloc(0);
      return out;
    }
    while (this.buffered.length >= FRAME_HEADER) {
      const length = this.buffered.readUIntBE(0, 3);
      if (length > MAX_FRAME_READ) throw new Http2FrameError(`frame of ${length} bytes`);
      if (this.buffered.length < FRAME_HEADER + length) break;
      const whole = this.buffered.subarray(0, FRAME_HEADER + length);
      this.buffered = this.buffered.subarray(FRAME_HEADER + length);
      const rewritten = this.frame(whole);
      if (rewritten !== undefined) out.push(rewritten);
    }
    return out;
  }

  private passThrough = false;

  private frame(whole: Buffer): Buffer | undefined {
    const type = whole[3]!;
    const flags = whole[4]!;
    const streamId = whole.readUInt32BE(5) & 0x7fffffff;
    const payload = whole.subarray(FRAME_HEADER);
    if (this.pending !== undefined) {
      if (type !== TYPE_CONTINUATION || streamId !== this.pending.streamId) {
        throw new Http2FrameError('a header block was interrupted by another frame');
      }
      this.addFragment(payload);
      if ((flags & FLAG_END_HEADERS) === 0) return undefined;
      const { fragments, flags: headersFlags } = this.pending;
      this.pending = undefined;
      return this.headers(streamId, headersFlags, Buffer.concat(fragments));
    }
    if (type === TYPE_CONTINUATION) throw new Http2FrameError('CONTINUATION without a HEADERS frame');
    if (type !== TYPE_HEADERS) return whole;

    let pos = 0;
    let padding = 0;
    if ((flags & FLAG_PADDED) !== 0) {
      if (payload.length < 1) throw new Http2FrameError('padded HEADERS frame without a pad length');
      padding = payload[0]!;
      pos = 1;
    }
    if ((flags & FLAG_PRIORITY) !== 0) pos += 5;
    if (pos + padding > payload.length) throw new Http2FrameError('HEADERS frame padding exceeds its payload');
    const fragment = payload.subarray(pos, payload.length - padding);
    this.pending = { streamId, flags, fragments: [], size: 0 };
    this.addFragment(fragment);
    if ((flags & FLAG_END_HEADERS) === 0) return undefined;
    const block = Buffer.concat(this.pending.fragments);
    this.pending = undefined;
    return this.headers(streamId, flags, block);
  }

  private addFragment(fragment: Buffer): void {
    const p = this.pending!;
    p.size += fragment.length;
    if (p.size > MAX_HEADER_BLOCK) throw new Http2FrameError(`header block larger than ${MAX_HEADER_BLOCK} bytes`);
    p.fragments.push(fragment);
  }

  private headers(streamId: number, flags: number, block: Buffer): Buffer {
    const fields: HeaderField[] = this.decoder.decode(block).map((f) => {
      if (f.name !== ':authority' || VALID_AUTHORITY.test(f.value)) return f;
      this.rewritten++;
      return { ...f, value: REPLACEMENT_AUTHORITY };
    });
    const encoded = encodeHeaderBlock(fields);
    const frames: Buffer[] = [];
    for (let pos = 0; pos === 0 || pos < encoded.length; pos += MAX_FRAME) {
      const piece = encoded.subarray(pos, pos + MAX_FRAME);
      const last = pos + MAX_FRAME >= encoded.length;
      const endHeaders = last ? FLAG_END_HEADERS : 0;
      if (pos === 0) frames.push(frame(TYPE_HEADERS, (flags & FLAG_END_STREAM) | endHeaders, streamId, piece));
      else frames.push(frame(TYPE_CONTINUATION, endHeaders, streamId, piece));
    }
    return Buffer.concat(frames);
  }
}

/**
 * The socket as the HTTP/2 server should see it: what the client sends goes
 * through an AuthorityRewriter; what the server writes goes out unchanged.
 * A header block that cannot be decoded ends the connection (`onError` says why).
 */
export function withAuthorityRewrite(socket: Socket, onError: (err: Error) => void): Duplex {
  const rewriter = new AuthorityRewriter();
  const duplex = new Duplex({
    read() {
      socket.resume();
    },
    write(chunk: Buffer, _enc, cb) {
      if (socket.destroyed) {
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
  socket.on('data', (chunk: Buffer) => {
    let out: Buffer[];
    try {
      out = rewriter.push(chunk);
    } catch (err: unknown) {
      if (err instanceof Http2FrameError || err instanceof HpackError) {
        onError(err);
        socket.destroy();
        return;
      }
      throw err;
    }
    for (const piece of out) {
      if (!duplex.push(piece)) socket.pause();
    }
  });
  socket.once('end', () => duplex.push(null));
  socket.once('close', () => duplex.destroy());
  socket.on('error', () => {
    // 'close' follows; the HTTP/2 session sees the end.
  });
  return duplex;
}
