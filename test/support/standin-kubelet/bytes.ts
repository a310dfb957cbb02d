// The deterministic byte pattern served by GET /bytes?n=<count>:
// byte i is ((i mod 256) * 31 + 7) & 0xff. It repeats every 256 bytes, so a
// receiver can check any amount of it without holding it.

import type { Writable } from 'node:stream';
import { PatternMismatchError } from './errors.js';

const PERIOD = 256;
const BLOCK_BYTES = 64 * 1024;

export function patternByte(index: number): number {
  return ((index % PERIOD) * 31 + 7) & 0xff;
}

/** `length` bytes of the pattern starting at `offset`. */
export function patternBytes(offset: number, length: number): Buffer {
  const out = Buffer.allocUnsafe(length);
  for (let i = 0; i < length; i++) out[i] = patternByte(offset + i);
  return out;
}

// One period longer than the largest slice we hand out, so a slice can start at any phase.
const BLOCK = patternBytes(0, BLOCK_BYTES + PERIOD);

/** A read-only view of `length` (≤ 64 KiB) pattern bytes starting at `offset`, without copying. */
export function patternView(offset: number, length: number): Buffer {
  if (length > BLOCK_BYTES) throw new RangeError(`pattern views are at most ${BLOCK_BYTES} bytes, asked for ${length}`);
  const phase = offset % PERIOD;
  return BLOCK.subarray(phase, phase + length);
}

/** Checks a stream of bytes against the pattern, chunk by chunk. */
export class PatternVerifier {
  private offset: number;

  constructor(startOffset = 0) {
    this.offset = startOffset;
  }

  /** Bytes checked so far (plus the start offset). */
  get received(): number {
    return this.offset;
  }

  /** Throws PatternMismatchError naming the first wrong byte. */
  update(chunk: Uint8Array): void {
    let pos = 0;
    while (pos < chunk.length) {
      const len = Math.min(BLOCK_BYTES, chunk.length - pos);
      const got = chunk.subarray(pos, pos + len);
      const want = patternView(this.offset, len);
      if (Buffer.compare(got, want) !== 0) {
        for (let i = 0; i < len; i++) {
          if (got[i] !== want[i]) throw new PatternMismatchError(this.offset + i, want[i]!, got[i]!);
        }
      }
      pos += len;
      this.offset += len;
    }
  }
}

/**
 * Writes `total` pattern bytes to `out`, waiting for 'drain' whenever write()
 * returns false, then ends it. Stops quietly if `out` is destroyed first.
 */
export function writePattern(out: Writable, total: number, chunkBytes = BLOCK_BYTES): void {
  let sent = 0;
  const step = (): void => {
    while (sent < total) {
      if (out.destroyed) return;
      const len = Math.min(chunkBytes, total - sent);
      const ok = out.write(patternView(sent, len));
      sent += len;
      if (!ok) {
        out.once('drain', step);
        return;
      }
    }
    out.end();
  };
  out.once('close', () => out.removeListener('drain', step));
  step();
}
