// A map from 64-bit IDs (connectIDs, dial IDs) to values, for tables that
// live as long as a link or the server while an entry comes and goes with
// every connection. V8's Map replaces its hash table every few additions and
// deletions, and an old Map's replaced table keeps a link to its successor, so
// under connection churn each new table is held through two scavenges and
// promoted: ~70 bytes of old generation per connection per table
// (bench/README.md, "Connection tables that stay put"). Here the arrays are
// replaced only when the table doubles or halves; a delete clears its slot.
//
// Open addressing with linear probing, at most half full, and backward-shift
// deletion (no tombstones, so deletes never force a rebuild). The hash mixes
// all 64 bits of the key with a per-table random seed: a peer that picks its
// connectIDs cannot aim them at one run of slots without knowing the seed.

import { randomInt } from 'node:crypto';
import { objectSlots } from './object-array.js';

const MIN_CAPACITY = 8;
/** A key's low 64 bits as two 32-bit halves, without a BigInt operation (one code path for every key: no deopt when the first large one comes). */
const keyBits = new BigUint64Array(1);
const keyHalves = new Uint32Array(keyBits.buffer);

export class IdMap<V> {
  private keys: Array<bigint | undefined> = objectSlots(MIN_CAPACITY);
  private vals: Array<V | undefined> = objectSlots(MIN_CAPACITY);
  private mask = MIN_CAPACITY - 1;
  private count = 0;
  private readonly seedLow = randomInt(0, 2 ** 32) | 0;
  private readonly seedHigh = randomInt(0, 2 ** 32) | 0;

  get size(): number {
    return this.count;
  }

  has(key: bigint): boolean {
    return this.keys[this.slotOf(key)] !== undefined;
  }

  get(key: bigint): V | undefined {
    // An empty slot's value is undefined too.
    return this.vals[this.slotOf(key)];
  }

  set(key: bigint, value: V): void {
    const i = this.slotOf(key);
    this.vals[i] = value;
    if (this.keys[i] !== undefined) return;
    this.keys[i] = key;
    this.count++;
    if (this.count * 2 > this.keys.length) this.resize(this.keys.length * 2);
  }

  /** Removes `key`; true if it was there. */
  delete(key: bigint): boolean {
    let hole = this.slotOf(key);
    if (this.keys[hole] === undefined) return false;
    // Move back every later key of the run that may not sit past the hole.
    for (let j = (hole + 1) & this.mask; ; j = (j + 1) & this.mask) {
      const k = this.keys[j];
      if (k === undefined) break;
      const h = this.home(k);
      const stays = hole <= j ? hole < h && h <= j : hole < h || h <= j;
      if (stays) continue;
      this.keys[hole] = k;
      this.vals[hole] = this.vals[j];
      hole = j;
    }
    this.keys[hole] = undefined;
    this.vals[hole] = undefined;
    this.count--;
    if (this.keys.length > MIN_CAPACITY && this.count * 8 < this.keys.length) this.resize(this.keys.length / 2);
    return true;
  }

  /** The values, copied: the map may change while the caller goes through them. */
  values(): V[] {
    const out: V[] = [];
    for (let i = 0; i < this.keys.length; i++) if (this.keys[i] !== undefined) out.push(this.vals[i]!);
    return out;
  }

  /** The keys, copied. */
  keyList(): bigint[] {
    const out: bigint[] = [];
    for (const k of this.keys) if (k !== undefined) out.push(k);
    return out;
  }

  clear(): void {
    this.keys = objectSlots(MIN_CAPACITY);
    this.vals = objectSlots(MIN_CAPACITY);
    this.mask = MIN_CAPACITY - 1;
    this.count = 0;
  }

  /** Where `key` is, or else the empty slot that ends its run (where it would go). */
  private slotOf(key: bigint): number {
    for (let i = this.home(key); ; i = (i + 1) & this.mask) {
      const k = this.keys[i];
      if (k === undefined || k === key) return i;
    }
  }

  private home(key: bigint): number {
    keyBits[0] = key;
    let h = Math.imul(keyHalves[0]! ^ this.seedLow, 0x9e3779b1) ^ Math.imul(keyHalves[1]! ^ this.seedHigh, 0x85ebca77);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 12;
    return h & this.mask;
  }

  private resize(capacity: number): void {
    const keys = this.keys;
    const vals = this.vals;
    this.keys = objectSlots(capacity);
    this.vals = objectSlots(capacity);
    this.mask = capacity - 1;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i];
      if (k === undefined) continue;
      const j = this.slotOf(k);
      this.keys[j] = k;
      this.vals[j] = vals[i];
    }
  }
}
