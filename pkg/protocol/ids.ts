import { randomBytes } from 'node:crypto';

const INT63_MASK = (1n << 63n) - 1n;

/** A random dial ID in [1, 2^63-1], as Go's rand.Int63 gives (never 0, which means unset). */
export function newDialID(): bigint {
  for (;;) {
    const v = randomBytes(8).readBigUInt64BE() & INT63_MASK;
    if (v !== 0n) return v;
  }
}
