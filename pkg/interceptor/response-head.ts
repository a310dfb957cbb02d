// Reads an HTTP/1.1 response head from a stream, keeping its exact bytes, so
// an upgrade answer (101 or a refusal) can be passed on unchanged.

import type { Duplex } from 'node:stream';

export interface RawResponseHead {
  /** The head's bytes, through the blank line. */
  raw: Buffer;
  status: number;
  /** Header names lower-cased. */
  headers: Map<string, string>;
  /** Bytes that came after the head. */
  rest: Buffer;
}

/** The status of an HTTP/1.x status line, or undefined if it is not one. */
export function statusOf(statusLine: string): number | undefined {
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
  return m === null ? undefined : Number(m[1]);
}

/**
 * Resolves once the blank line has arrived. The stream is left as it was
 * found, with no listener of ours and not flowing: a pipe or a 'data'
 * listener starts it, and the bytes read past the head are in `rest`.
 */
export function readResponseHead(stream: Duplex, maxBytes = 64 * 1024, timeoutMs = 30_000): Promise<RawResponseHead> {
  return new Promise((resolve, reject) => {
    let buf: Buffer = Buffer.alloc(0);
    const finish = (err?: Error, head?: RawResponseHead): void => {
      clearTimeout(timer);
      stream.off('readable', onReadable);
      stream.off('end', onEnd);
      stream.off('error', onError);
      if (err !== undefined) reject(err);
      else resolve(head!);
    };
    const onReadable = (): void => {
      let chunk: Buffer | null;
      while ((chunk = stream.read() as Buffer | null) !== null) {
        buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) {
          if (buf.length > maxBytes) return finish(new Error(`response head larger than ${maxBytes} bytes`));
          continue;
        }
        const text = buf.toString('latin1', 0, end);
        const [statusLine, ...lines] = text.split('\r\n');
        const status = statusOf(statusLine ?? '');
        if (status === undefined) return finish(new Error(`malformed response status line ${JSON.stringify(statusLine?.slice(0, 100))}`));
        const headers = new Map<string, string>();
        for (const line of lines) {
          const colon = line.indexOf(':');
          if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
        }
        return finish(undefined, { raw: buf.subarray(0, end + 4), status, headers, rest: buf.subarray(end + 4) });
      }
    };
    const onEnd = (): void => finish(new Error(`connection closed after ${buf.length} bytes, before a complete response head`));
    const onError = (err: Error): void => finish(err);
    const timer = setTimeout(() => finish(new Error(`no response head within ${timeoutMs} ms`)), timeoutMs);
    timer.unref();
    stream.on('readable', onReadable);
    stream.once('end', onEnd);
    stream.once('error', onError);
  });
}
