// Payloads for the tests of what waits for a slow reader (coalescer.ts):
// deterministic, of sizes on either side of every threshold of the
// coalescing, some of them small views of a larger read (as from HTTP/2),
// each byte numbered so that a lost, doubled or misplaced byte shows.

import { COALESCE_BELOW, COALESCE_CHUNK } from '../../pkg/mux/coalescer.js';

/** A deterministic stream of numbers in [0, 1) (mulberry32). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let r = Math.imul(a ^ (a >>> 15), 1 | a);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return ((r ^ (r >>> 14)) >>> 0) / 4294967296;
  };
}

const SIZES = [1, 1, 1, 2, 100, COALESCE_BELOW - 1, COALESCE_BELOW, COALESCE_BELOW + 1, COALESCE_CHUNK - 1, COALESCE_CHUNK, COALESCE_CHUNK + 1, 70_000];

/** The next payload, each call. */
export function payloads(rand: () => number): () => Buffer {
  let next = 0;
  return () => {
    const n = SIZES[Math.floor(rand() * SIZES.length)]!;
    const read = Buffer.allocUnsafe(rand() < 0.3 ? n * 8 : n);
    const p = read.subarray(0, n);
    for (let i = 0; i < n; i++) p[i] = (next++ * 7) % 253;
    return p;
  };
}
