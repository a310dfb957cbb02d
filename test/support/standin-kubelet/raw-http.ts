// A raw HTTP/1.1 client side for tests: send a request head byte for byte
// (names, order and repeats as given), read the response head and body.

import { connect, type ConnectionOptions, type TLSSocket } from 'node:tls';
import type { Duplex } from 'node:stream';
import { StandinTimeoutError } from './errors.js';

export interface ResponseHead {
  status: number;
  reason: string;
  /** In received order, names as written. */
  headers: Array<[string, string]>;
  /** The head's text, status line to the blank line included. */
  raw: string;
}

const MAX_HEAD_BYTES = 64 * 1024;

export function requestHead(method: string, target: string, headers: ReadonlyArray<readonly [string, string]>): Buffer {
  const lines = [`${method} ${target} HTTP/1.1`, ...headers.map(([k, v]) => `${k}: ${v}`), '', ''];
  return Buffer.from(lines.join('\r\n'), 'latin1');
}

/** The first value of a header, compared case-insensitively. */
export function headerValue(head: { headers: ReadonlyArray<readonly [string, string]> }, name: string): string | undefined {
  const lower = name.toLowerCase();
  return head.headers.find(([k]) => k.toLowerCase() === lower)?.[1];
}

export function parseResponseHead(raw: string): ResponseHead {
  const lines = raw.split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3}) ?(.*)$/.exec(lines[0] ?? '');
  if (m === null) throw new Error(`not an HTTP/1.x status line: ${JSON.stringify(lines[0])}`);
  const headers: Array<[string, string]> = [];
  for (const line of lines.slice(1)) {
    if (line === '') continue;
    const i = line.indexOf(':');
    if (i <= 0) throw new Error(`malformed header line: ${JSON.stringify(line)}`);
    headers.push([line.slice(0, i), line.slice(i + 1).trim()]);
  }
  return { status: Number(m[1]), reason: m[2] ?? '', headers, raw };
}

/**
 * Collects bytes from `socket` until `done(buffered, latestChunk)` returns an
 * index ≥ 0; rejects on end, error or timeout. Leaves the socket paused.
 */
function collectUntil(
  socket: Duplex,
  done: (buf: Buffer, chunk: Buffer) => number,
  what: string,
  timeoutMs: number,
  maxBytes: number,
): Promise<{ data: Buffer; index: number }> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const finish = (err: Error | null, index = -1): void => {
      clearTimeout(timer);
      socket.removeListener('data', onData);
      socket.removeListener('end', onEnd);
      socket.removeListener('error', onError);
      socket.pause();
      if (err !== null) reject(err);
      else resolve({ data: buf, index });
    };
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      const index = done(buf, chunk);
      if (index >= 0) finish(null, index);
      else if (buf.length > maxBytes) finish(new Error(`${what}: more than ${maxBytes} bytes without the end`));
    };
    const onEnd = (): void => finish(new Error(`${what}: the connection ended after ${buf.length} bytes`));
    const onError = (err: Error): void => finish(err);
    const timer = setTimeout(() => finish(new StandinTimeoutError(`${what}: nothing complete after ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('error', onError);
    socket.resume();
  });
}

/**
 * Reads one response head. The socket is left paused; `rest` holds the bytes
 * that came after the head (body or upgraded protocol).
 */
export async function readResponseHead(socket: Duplex, timeoutMs = 5000): Promise<{ head: ResponseHead; rest: Buffer }> {
  const { data, index } = await collectUntil(socket, (b) => b.indexOf('\r\n\r\n'), 'reading a response head', timeoutMs, MAX_HEAD_BYTES);
  return { head: parseResponseHead(data.subarray(0, index + 4).toString('latin1')), rest: data.subarray(index + 4) };
}

/** Reads a body framed by Content-Length, chunked encoding, or the end of the connection. */
export async function readBody(socket: Duplex, head: ResponseHead, rest: Buffer, timeoutMs = 5000, maxBytes = 16 * 1024 * 1024): Promise<Buffer> {
  const length = headerValue(head, 'content-length');
  if (head.status === 101 || head.status === 204 || head.status === 304) return Buffer.alloc(0);
  if ((headerValue(head, 'transfer-encoding') ?? '').toLowerCase() === 'chunked') {
    const decoder = new ChunkedDecoder();
    const bodyParts: Buffer[] = [];
    const feed = (b: Buffer): number => {
      bodyParts.push(...decoder.push(b));
      return decoder.done ? 0 : -1;
    };
    if (feed(rest) < 0) await collectUntil(socket, (_all, chunk) => feed(chunk), 'reading a chunked body', timeoutMs, maxBytes);
    return Buffer.concat(bodyParts);
  }
  if (length !== undefined) {
    const n = Number(length);
    if (rest.length >= n) return rest.subarray(0, n);
    const { data } = await collectUntil(socket, (b) => (rest.length + b.length >= n ? 0 : -1), 'reading a body', timeoutMs, maxBytes);
    return Buffer.concat([rest, data]).subarray(0, n);
  }
  return readToEnd(socket, rest, timeoutMs, maxBytes);
}

/** Everything until the peer ends the connection. */
export function readToEnd(socket: Duplex, rest: Buffer, timeoutMs = 5000, maxBytes = 16 * 1024 * 1024): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts = [rest];
    let total = rest.length;
    const cleanup = (): void => {
      clearTimeout(timer);
      socket.removeListener('data', onData);
      socket.removeListener('end', onEnd);
      socket.removeListener('error', onError);
    };
    const onData = (c: Buffer): void => {
      parts.push(c);
      total += c.length;
      if (total > maxBytes) {
        cleanup();
        reject(new Error(`reading to the end: more than ${maxBytes} bytes`));
      }
    };
    const onEnd = (): void => {
      cleanup();
      resolve(Buffer.concat(parts));
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(err);
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new StandinTimeoutError(`reading to the end: still open after ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('error', onError);
    socket.resume();
  });
}

/** Decodes Transfer-Encoding: chunked incrementally. */
export class ChunkedDecoder {
  private pending: Buffer = Buffer.alloc(0);
  private left = -1; // bytes left in the current chunk, -1 while reading a size line
  done = false;

  push(input: Buffer): Buffer[] {
    const out: Buffer[] = [];
    this.pending = this.pending.length === 0 ? input : Buffer.concat([this.pending, input]);
    while (!this.done) {
      if (this.left < 0) {
        const eol = this.pending.indexOf('\r\n');
        if (eol < 0) break;
        const size = parseInt(this.pending.subarray(0, eol).toString('latin1').split(';')[0]!.trim(), 16);
        if (!Number.isFinite(size) || size < 0) throw new Error('malformed chunk size line');
        this.pending = this.pending.subarray(eol + 2);
        if (size === 0) {
          this.done = true; // trailers, if any, are ignored
          break;
        }
        this.left = size;
      } else if (this.left > 0) {
        if (this.pending.length === 0) break;
        const n = Math.min(this.left, this.pending.length);
        out.push(this.pending.subarray(0, n));
        this.pending = this.pending.subarray(n);
        this.left -= n;
      } else {
        if (this.pending.length < 2) break;
        this.pending = this.pending.subarray(2); // CRLF after the chunk data
        this.left = -1;
      }
    }
    return out;
  }
}

/** Dials TLS and waits for the handshake. */
export function dialTLS(opts: ConnectionOptions, timeoutMs = 5000): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = connect(opts);
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new StandinTimeoutError(`TLS handshake with ${String(opts.host)}:${String(opts.port)} not done after ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    socket.once('secureConnect', () => {
      clearTimeout(timer);
      socket.removeListener('error', onError);
      resolve(socket);
    });
    const onError = (err: Error): void => {
      clearTimeout(timer);
      socket.destroy();
      reject(err);
    };
    socket.once('error', onError);
  });
}
