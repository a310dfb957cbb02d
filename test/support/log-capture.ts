// A real winston logger (pkg/log/logger.ts) writing into memory: for tests of
// what actually reaches a log stream, bytes and all.

import { Writable } from 'node:stream';
import { createLogger, type LogFormat, type Logger } from '../../pkg/log/logger.js';

export interface LogCapture {
  logger: Logger;
  /** Everything written so far. */
  text(): string;
  /** Complete lines written so far. */
  lines(): string[];
  /** Bytes written so far. */
  readonly bytes: number;
}

export function captureLog(format: LogFormat = 'text', verbosity = 0): LogCapture {
  const chunks: Buffer[] = [];
  let bytes = 0;
  const stream = new Writable({
    write(chunk: Buffer | string, _encoding, cb) {
      const b = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
      chunks.push(b);
      bytes += b.length;
      cb();
    },
  });
  const text = (): string => Buffer.concat(chunks).toString('utf8');
  return {
    logger: createLogger({ format, verbosity, stream }),
    text,
    lines: () => text().split('\n').slice(0, -1),
    get bytes() {
      return bytes;
    },
  };
}
