// What a reader got from a stream, without keeping it: its SHA-256 and length.

import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';

/** Reads `s` to its end (resuming it: connectVia leaves it paused); resolves with the SHA-256 and the length; `progress` sees the count. */
export function digestToEnd(s: Socket, progress: (bytes: number) => void = () => {}): Promise<{ hash: string; bytes: number }> {
  const hash = createHash('sha256');
  let bytes = 0;
  return new Promise((resolve, reject) => {
    s.on('data', (c: Buffer) => {
      hash.update(c);
      bytes += c.length;
      progress(bytes);
    });
    s.once('end', () => resolve({ hash: hash.digest('hex'), bytes }));
    s.once('error', reject);
    s.resume();
  });
}
