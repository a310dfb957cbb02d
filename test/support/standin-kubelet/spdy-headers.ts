// SPDY/3 header blocks: the name/value block format and its zlib stream,
// primed with the SPDY/3 dictionary, one stream per direction per session.

import { constants, createInflate, type Inflate } from 'node:zlib';
import { SpdyProtocolError } from './errors.js';

/** Header names are lower case; several values of one name are joined with NUL. */
export type SpdyHeaders = Record<string, string>;

const DICTIONARY_WORDS = [
  'options',
  'head',
  'post',
  'put',
  'delete',
  'trace',
  'accept',
  'accept-charset',
  'accept-encoding',
  'accept-language',
  'accept-ranges',
  'age',
  'allow',
  'authorization',
  'cache-control',
  'connection',
  'content-base',
  'content-encoding',
  'content-language',
  'content-length',
  'content-location',
  'content-md5',
  'content-range',
  'content-type',
  'date',
  'etag',
  'expect',
  'expires',
  'from',
  'host',
  'if-match',
  'if-modified-since',
  'if-none-match',
  'if-range',
  'if-unmodified-since',
  'last-modified',
  'location',
  'max-forwards',
  'pragma',
  'proxy-authenticate',
  'proxy-authorization',
  'range',
  'referer',
  'retry-after',
  'server',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'user-agent',
  'vary',
  'via',
  'warning',
  'www-authenticate',
  'method',
  'get',
  'status',
  '200 OK',
  'version',
  'HTTP/1.1',
  'url',
  'public',
  'set-cookie',
  'keep-alive',
  'origin',
];
const DICTIONARY_TAIL =
  '100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505' +
  '203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized' +
  '403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable' +
  'Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT' +
  'chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,' +
  'text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.';

/** The SPDY/3 zlib dictionary: length-prefixed common words, then a raw tail (1423 bytes, Adler-32 0xe3c6a7c2). */
export const SPDY3_DICTIONARY: Buffer = Buffer.concat([
  ...DICTIONARY_WORDS.map((w) => {
    const b = Buffer.alloc(4 + w.length);
    b.writeUInt32BE(w.length, 0);
    b.write(w, 4, 'latin1');
    return b;
  }),
  Buffer.from(DICTIONARY_TAIL, 'latin1'),
]);

export function adler32(data: Uint8Array): number {
  let a = 1;
  let b = 0;
  for (let i = 0; i < data.length; i++) {
    a = (a + data[i]!) % 65521;
    b = (b + a) % 65521;
  }
  return ((b << 16) | a) >>> 0;
}

export function serializeHeaderBlock(headers: SpdyHeaders): Buffer {
  const entries = Object.entries(headers);
  const parts: Buffer[] = [u32(entries.length)];
  for (const [name, value] of entries) {
    if (name === '' || name !== name.toLowerCase()) throw new TypeError(`SPDY header names must be non-empty lower case, got ${JSON.stringify(name)}`);
    const n = Buffer.from(name, 'latin1');
    const v = Buffer.from(value, 'latin1');
    parts.push(u32(n.length), n, u32(v.length), v);
  }
  return Buffer.concat(parts);
}

export function parseHeaderBlock(block: Buffer): SpdyHeaders {
  const headers: SpdyHeaders = {};
  let pos = 0;
  const read = (what: string): Buffer => {
    if (pos + 4 > block.length) throw new SpdyProtocolError(`header block truncated reading the ${what} length`);
    const len = block.readUInt32BE(pos);
    pos += 4;
    if (pos + len > block.length) throw new SpdyProtocolError(`header block truncated reading a ${what} of ${len} bytes`);
    const out = block.subarray(pos, pos + len);
    pos += len;
    return out;
  };
  if (block.length < 4) throw new SpdyProtocolError('header block shorter than its pair count');
  const count = block.readUInt32BE(0);
  pos = 4;
  for (let i = 0; i < count; i++) {
    const name = read('name').toString('latin1');
    const value = read('value').toString('latin1');
    if (name === '') throw new SpdyProtocolError('empty header name');
    if (Object.hasOwn(headers, name)) throw new SpdyProtocolError(`header ${name} appears twice`);
    headers[name] = value;
  }
  if (pos !== block.length) throw new SpdyProtocolError(`${block.length - pos} stray bytes after the header block`);
  return headers;
}

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n, 0);
  return b;
}

/**
 * The sending side's zlib stream, written as stored (uncompressed) deflate
 * blocks. It is a valid zlib stream with the dictionary announced, so any
 * SPDY/3 peer inflates it, and unlike node:zlib's streaming API it is
 * synchronous: frames leave in exactly the order they were made.
 */
const SYNC_FLUSH_MARKER = Buffer.from([0x00, 0x00, 0x00, 0xff, 0xff]);

export class HeaderCompressor {
  private started = false;

  compress(headers: SpdyHeaders): Buffer {
    const raw = serializeHeaderBlock(headers);
    const parts: Buffer[] = [];
    if (!this.started) {
      this.started = true;
      // CMF 0x78 (deflate, 32 KiB window), FLG 0xf9 (FDICT, level 3, check bits), then the dictionary id.
      parts.push(Buffer.from([0x78, 0xf9]), u32(adler32(SPDY3_DICTIONARY)));
    }
    for (let pos = 0; pos < raw.length; pos += 0xffff) {
      const piece = raw.subarray(pos, pos + 0xffff);
      const h = Buffer.allocUnsafe(5);
      h[0] = 0x00; // BFINAL=0, BTYPE=00 (stored); we are always byte aligned
      h.writeUInt16LE(piece.length, 1);
      h.writeUInt16LE(~piece.length & 0xffff, 3);
      parts.push(h, piece);
    }
    // An empty stored block ends every header block, as a zlib sync flush does. Go's inflater
    // hands out a block's bytes only at such a marker (or when it reads on into the next frame,
    // which fails: "compressed payload size was incorrect", and kubectl drops the session).
    parts.push(SYNC_FLUSH_MARKER);
    return Buffer.concat(parts);
  }
}

/** The receiving side's zlib stream. Blocks must be given in frame order, one at a time. */
export class HeaderDecompressor {
  private readonly inflate: Inflate;
  private output: Buffer[] = [];
  private outputBytes = 0;
  private failure: SpdyProtocolError | null = null;
  private pending: { resolve: (h: SpdyHeaders) => void; reject: (err: Error) => void } | null = null;

  constructor(private readonly maxBlockBytes = 64 * 1024) {
    this.inflate = createInflate({ dictionary: SPDY3_DICTIONARY, flush: constants.Z_SYNC_FLUSH });
    // Flowing mode: inflate pushes output (and so emits 'data') before it calls the write callback.
    this.inflate.on('data', (chunk: Buffer) => {
      this.output.push(chunk);
      this.outputBytes += chunk.length;
      if (this.outputBytes > this.maxBlockBytes) this.fail(new SpdyProtocolError(`a header block inflates to more than ${this.maxBlockBytes} bytes`));
    });
    this.inflate.on('error', (err: Error) => this.fail(new SpdyProtocolError(`cannot inflate a header block: ${err.message}`)));
  }

  decompress(compressed: Buffer): Promise<SpdyHeaders> {
    if (this.pending !== null) return Promise.reject(new Error('HeaderDecompressor.decompress() called before the previous block was done'));
    if (this.failure !== null) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.inflate.write(compressed, () => {
        const p = this.pending;
        if (p === null) return; // already failed
        this.pending = null;
        const out = Buffer.concat(this.output);
        this.output = [];
        this.outputBytes = 0;
        try {
          p.resolve(parseHeaderBlock(out));
        } catch (err: unknown) {
          p.reject(err instanceof Error ? err : new SpdyProtocolError(String(err)));
        }
      });
    });
  }

  destroy(): void {
    this.fail(new SpdyProtocolError('the header decompressor was destroyed'));
  }

  // A zlib stream that failed (or was cut off) may never call the write callback; settle here.
  private fail(err: SpdyProtocolError): void {
    this.failure ??= err;
    const p = this.pending;
    this.pending = null;
    this.output = [];
    this.outputBytes = 0;
    this.inflate.destroy();
    p?.reject(this.failure);
  }
}
