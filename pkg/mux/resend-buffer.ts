// The packets one end of a resumable session has sent and the peer has not
// acknowledged yet, by sequence number (proto/yurttunnel_ext.proto): what is
// resent, in order, when the session resumes on a new link.
//
// DATA is kept by reference, never copied. A payload is not reused once
// written, except a view of a pooled slab (buffer-pool.ts): that one is
// retained while kept and released when acknowledged, so its slab cannot go
// back to the pool and be read into while the peer may still need it.
// Entries live in a ring of two arrays, so appending and acknowledging
// allocate nothing per packet once the ring has grown to the traffic in flight.
// The ring is made on the first packet: an idle agent link (most of a
// server's thousand) keeps none.
//
// Bounds: what is kept is what is in flight on the transport. Every
// connection of a session rides one HTTP/2 stream, so that is bounded by the
// HTTP/2 window the peer grants (16 MiB by default each way), plus the
// acknowledgement's delay (≤ 1 MiB or 64 packets, then a round trip) -- not by
// the sum of the connections' own windows, which with 100 busy connections is
// 100 MiB. `bench/resume-memory.ts` measured 16 MiB at most per end with 100
// connections streaming both ways, dark path and reset included. Past
// maxDataBytes (DEFAULT_MAX_DATA_BYTES, twice that) `full` holds the writers
// (back-pressure): only a peer that takes packets without acknowledging them
// gets there. Control packets cannot wait, so more than maxControlPackets
// unacknowledged means the peer does not acknowledge, and appending throws.
// On the server every buffer also charges its DATA to the server-wide
// ResumeBudget (resume-budget.ts), and releases it once: when acknowledged,
// or when cleared.

import { ResumeError } from '../protocol/errors.js';
import type { KnownPacket } from '../protocol/packet.js';
import { releaseSlab, retainSlab } from './buffer-pool.js';
import type { ResumeBudget } from './resume-budget.js';

export interface ResendBufferOptions {
  /** DATA bytes kept before `full` holds writers. Default DEFAULT_MAX_DATA_BYTES (32 MiB). */
  maxDataBytes?: number;
  /** Control packets kept before appending another throws. Default 65,536. */
  maxControlPackets?: number;
  /** Shared by every buffer of a server: DATA kept is charged to it. */
  budget?: ResumeBudget;
}

/** Twice the HTTP/2 window in flight (16 MiB each way by default): normal traffic never waits on it. */
export const DEFAULT_MAX_DATA_BYTES = 32 * 1024 * 1024;

const INITIAL_CAPACITY = 64;
/** A ring larger than this is given back once empty. */
const SHRINK_ABOVE = 1024;

export class ResendBuffer {
  /** connectID of a DATA entry; undefined for a control packet. Empty until the first packet. */
  private ids: Array<bigint | undefined> = [];
  /** The payload of a DATA entry, or the control packet. */
  private items: Array<Buffer | KnownPacket | undefined> = [];
  /** Ring position of the oldest entry. */
  private head = 0;
  private count = 0;
  /** Sequence number of the oldest entry (everything below is acknowledged). */
  private base = 0;
  private data = 0;
  private controls = 0;
  private readonly maxDataBytes: number;
  private readonly maxControlPackets: number;
  private readonly budget: ResumeBudget | undefined;

  constructor(opts: ResendBufferOptions = {}) {
    this.maxDataBytes = opts.maxDataBytes ?? DEFAULT_MAX_DATA_BYTES;
    this.maxControlPackets = opts.maxControlPackets ?? 65_536;
    this.budget = opts.budget;
    if (!(this.maxDataBytes > 0) || !Number.isInteger(this.maxControlPackets) || this.maxControlPackets < 1) {
      throw new TypeError(`invalid resend buffer limits ${JSON.stringify(opts)}`);
    }
  }

  /** The sequence number the next packet appended gets. */
  get next(): number {
    return this.base + this.count;
  }

  /** Every packet below this sequence number has been acknowledged (and let go). */
  get acknowledged(): number {
    return this.base;
  }

  /** Packets kept. */
  get length(): number {
    return this.count;
  }

  /** DATA payload bytes kept. */
  get dataBytes(): number {
    return this.data;
  }

  get controlPackets(): number {
    return this.controls;
  }

  /** DATA kept has reached maxDataBytes: writers should wait for acknowledgements. */
  get full(): boolean {
    return this.data >= this.maxDataBytes;
  }

  /** The server's budget is spent and this buffer keeps its share of it: writers should wait for room. */
  get overBudget(): boolean {
    return this.budget?.mustWait(this.data) === true;
  }

  /** Keeps a DATA packet (its payload by reference); returns its sequence number. */
  appendData(connectID: bigint, data: Buffer): number {
    retainSlab(data);
    this.push(connectID, data);
    this.data += data.length;
    this.budget?.charge(data.length, this.data);
    return this.next - 1;
  }

  /** Keeps a control packet; returns its sequence number. Throws when the peer has left too many unacknowledged. */
  appendControl(packet: KnownPacket): number {
    if (this.controls >= this.maxControlPackets) {
      throw new ResumeError(
        'YT_ERR_RESUME_BUFFER_FULL',
        `${this.controls} control packets wait for the peer's acknowledgement (limit ${this.maxControlPackets}); the peer does not acknowledge`,
      );
    }
    this.push(undefined, packet);
    this.controls++;
    return this.next - 1;
  }

  /**
   * The peer has received every packet below `upTo`: let them go. An older
   * count changes nothing (acknowledgements are cumulative); one beyond what
   * was sent is a peer's error and throws.
   */
  acknowledge(upTo: number): void {
    if (upTo > this.next || !Number.isSafeInteger(upTo)) {
      throw new ResumeError('YT_ERR_RESUME_ACK_AHEAD', `the peer acknowledged ${upTo} packets, but only ${this.next} were sent`);
    }
    const { ids, items } = this;
    const capacity = items.length;
    const dataBefore = this.data;
    while (this.base < upTo) {
      const item = items[this.head];
      if (ids[this.head] === undefined) {
        this.controls--;
      } else {
        this.data -= (item as Buffer).length;
        releaseSlab(item as Buffer);
      }
      ids[this.head] = undefined;
      items[this.head] = undefined;
      this.head = (this.head + 1) % capacity;
      this.count--;
      this.base++;
    }
    if (this.data !== dataBefore) this.budget?.release(dataBefore - this.data, this.data);
    // A burst grew the ring; once it is all acknowledged, an idle link need not keep it.
    if (this.count === 0 && capacity > SHRINK_ABOVE) {
      this.ids = new Array<bigint | undefined>(INITIAL_CAPACITY);
      this.items = new Array<Buffer | KnownPacket | undefined>(INITIAL_CAPACITY);
      this.head = 0;
    }
  }

  /**
   * Hands every packet from sequence number `from` on, oldest first, to
   * `onData` or `onControl`. `from` is the peer's count of packets received:
   * one below what it acknowledged before, or above what was sent, cannot be
   * true and throws (the session cannot resume).
   */
  replay(from: number, onData: (connectID: bigint, data: Buffer) => void, onControl: (packet: KnownPacket) => void): void {
    this.checkResumeCount(from);
    // What the callbacks append (a writer let go by the replay) is sent by them, not replayed:
    // stop at the end as it is now, and read the ring afresh each time, as it may grow.
    const end = this.next;
    for (let seq = Math.max(from, this.base); seq < end; seq++) {
      const i = (this.head + seq - this.base) % this.items.length;
      const id = this.ids[i];
      if (id === undefined) onControl(this.items[i] as KnownPacket);
      else onData(id, this.items[i] as Buffer);
    }
  }

  /** Throws unless `received` is a count the peer can truly have: between what it acknowledged and what was sent. */
  checkResumeCount(received: number): void {
    if (!Number.isSafeInteger(received) || received < this.base || received > this.next) {
      throw new ResumeError(
        'YT_ERR_RESUME_BAD_COUNT',
        `the peer says it received ${received} packets; it acknowledged ${this.base} before and ${this.next} were sent`,
      );
    }
  }

  /** Lets every packet go (the session is over). Sequence numbers go on from where they were. */
  clear(): void {
    for (let k = 0; k < this.count; k++) {
      const i = (this.head + k) % this.items.length;
      if (this.ids[i] !== undefined) releaseSlab(this.items[i] as Buffer);
    }
    if (this.data > 0) this.budget?.release(this.data, 0);
    this.base = this.next;
    this.ids = [];
    this.items = [];
    this.head = 0;
    this.count = 0;
    this.data = 0;
    this.controls = 0;
  }

  /** Slots in the ring (for tests: it grows with the traffic in flight and is given back once idle). */
  get capacity(): number {
    return this.items.length;
  }

  private push(id: bigint | undefined, item: Buffer | KnownPacket): void {
    if (this.count === this.items.length) this.grow();
    const i = (this.head + this.count) % this.items.length;
    this.ids[i] = id;
    this.items[i] = item;
    this.count++;
  }

  /** Doubles the ring (or makes it), oldest entry first. */
  private grow(): void {
    const capacity = this.items.length;
    const ids = new Array<bigint | undefined>(Math.max(INITIAL_CAPACITY, capacity * 2));
    const items = new Array<Buffer | KnownPacket | undefined>(Math.max(INITIAL_CAPACITY, capacity * 2));
    for (let k = 0; k < this.count; k++) {
      const i = (this.head + k) % capacity;
      ids[k] = this.ids[i];
      items[k] = this.items[i];
    }
    this.ids = ids;
    this.items = items;
    this.head = 0;
  }
}
