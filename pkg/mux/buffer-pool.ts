// Fixed-size slabs that are given back and handed out again, so that bulk
// reads cost no new allocation: a slab kept until the peer acknowledges it
// (session resume) is neither garbage nor promoted by the GC to the old
// generation, and its memory is reused once it comes back. Re-measured
// against a pool that reuses nothing (npm run bench -- compare --quick, 3 runs
// of 2 rounds alternated with Konnectivity, on a loaded 2-core machine):
// without reuse bulk CPU per GiB rose 2.7 -> 3.8 s (server) and 2.2 -> 3.4 s
// (agent), bulk ÷ Konnectivity's fell 0.94x -> 0.60x, agent RSS after the run
// rose 72 -> 82 MB. It stays (test/unit/tuning-fence.test.ts).
//
// Two pools: the agent's target reads, and both ends' joins of gRPC messages
// that arrived in pieces (messageJoinPool; a received DATA payload is a view
// of its slab while its packet is handled).
//
// A small view of a large buffer is copied before it waits anywhere
// (holdable): a held byte then costs about a byte, not the buffer it came in.
//
// A slab is counted: whoever keeps a view of it (the socket relay's queue,
// a transport or socket write not yet called back, the resend buffer) retains it, and
// releases it when done. The last release puts it back in the pool. Views of
// ordinary Buffers pass through retainSlab/releaseSlab untouched, so the
// shared code (transport, resend buffer) calls them on every payload.
//
// A release too early would let the next read overwrite bytes still to be
// sent: with `poison` (YT_SLAB_POISON=1, and in tests) a slab is filled with
// POISON_BYTE when it comes back, so such a bug shows as corrupt data at once.

import { InternalError } from '../protocol/errors.js';

/** Payload bytes a slab holds: what one read of a target socket may fill. */
export const SLAB_PAYLOAD = 64 * 1024;
/**
 * Bytes free in front of the payload, for the framing written before it: the
 * gRPC prefix (5) and the largest DATA packet header (3 + a 5-byte length,
 * a 10-byte connectID with its tag, the payload's tag and 5-byte length).
 */
export const SLAB_HEADROOM = 32;
export const SLAB_SIZE = SLAB_HEADROOM + SLAB_PAYLOAD;
/** What a released slab is filled with in poison mode. */
export const POISON_BYTE = 0xa5;

interface SlabState {
  readonly pool: BufferPool;
  readonly slab: Buffer;
  refs: number;
}

/** Slab memory → its count. Weak: a slab whose holder never releases it (a bug) is still collected. */
const states = new WeakMap<ArrayBufferLike, SlabState>();

export interface BufferPoolOptions {
  /** Free slabs always kept for reuse. Default 32 (2 MiB), or maxFree if that is lower. */
  keepFree?: number;
  /**
   * Free slabs kept at most. Past keepFree they are kept only while traffic
   * takes them again: slabs that stayed unused for a whole trim interval are
   * given up. Default 512 (32 MiB): what a busy session-resume link has in
   * flight, so a bulk transfer that is waiting for acknowledgements finds its
   * slabs again instead of allocating new ones for the GC.
   */
  maxFree?: number;
  /** How often unused slabs past keepFree are given up. Default 5 s. */
  trimIntervalMs?: number;
  /** Fill released slabs with POISON_BYTE. Default: YT_SLAB_POISON=1 in the environment. */
  poison?: boolean;
  /**
   * Whether a view that starts SLAB_HEADROOM in has the room in front free for
   * its framing (slabWithRoom). Default true: reads leave it free. False for
   * slabs that hold data from their first byte (joined messages), where such a
   * view is only a later piece whose bytes in front may still be in flight.
   */
  framingRoom?: boolean;
}

export class BufferPool {
  private readonly free: Buffer[] = [];
  private readonly keepFree: number;
  private readonly maxFree: number;
  private readonly trimIntervalMs: number;
  /** The fewest free slabs since the last trim: that many were not needed in the interval. */
  private lowFree = 0;
  private trimTimer: NodeJS.Timeout | undefined;
  readonly poison: boolean;
  readonly framingRoom: boolean;
  /** Slabs allocated (not taken from the free list), for tests and the budget guard. */
  allocated = 0;
  /** Slabs handed out and not yet back. */
  outstanding = 0;

  constructor(opts: BufferPoolOptions = {}) {
    this.maxFree = opts.maxFree ?? 512;
    this.keepFree = Math.min(opts.keepFree ?? 32, this.maxFree);
    this.trimIntervalMs = opts.trimIntervalMs ?? 5000;
    this.poison = opts.poison ?? process.env.YT_SLAB_POISON === '1';
    this.framingRoom = opts.framingRoom ?? true;
  }

  /** A slab of SLAB_SIZE bytes, retained once (by the caller). */
  take(): Buffer {
    let slab = this.free.pop();
    if (this.free.length < this.lowFree) this.lowFree = this.free.length;
    if (slab === undefined) {
      slab = Buffer.allocUnsafeSlow(SLAB_SIZE);
      this.allocated++;
      states.set(slab.buffer, { pool: this, slab, refs: 1 });
    } else {
      states.get(slab.buffer)!.refs = 1;
    }
    this.outstanding++;
    return slab;
  }

  /** Free slabs held for reuse. */
  get freeCount(): number {
    return this.free.length;
  }

  /** Called by the last release. */
  giveBack(state: SlabState): void {
    this.outstanding--;
    if (this.poison) state.slab.fill(POISON_BYTE);
    if (this.free.length < this.maxFree) this.free.push(state.slab);
    else states.delete(state.slab.buffer);
    if (this.free.length > this.keepFree && this.trimTimer === undefined) {
      this.lowFree = this.free.length;
      this.trimTimer = setInterval(() => this.trim(), this.trimIntervalMs).unref();
    }
  }

  /**
   * Gives up the free slabs past keepFree that no take() needed since the
   * last trim (the oldest: the free list is used from its end). The timer
   * stops once only keepFree are left.
   */
  trim(): void {
    const spare = Math.min(this.lowFree, this.free.length - this.keepFree);
    if (spare > 0) for (const slab of this.free.splice(0, spare)) states.delete(slab.buffer);
    this.lowFree = this.free.length;
    if (this.free.length <= this.keepFree && this.trimTimer !== undefined) {
      clearInterval(this.trimTimer);
      this.trimTimer = undefined;
    }
  }
}

/** The agent's pool for reads of its target sockets. */
export const targetReadPool = new BufferPool();

/** Both ends' pool for gRPC messages that arrive in pieces and are joined (a 64 KiB DATA message always does). */
export const messageJoinPool = new BufferPool({ framingRoom: false });

/** True if `buf` is a view of a pooled slab that is handed out. */
export function isPooled(buf: Buffer): boolean {
  const s = states.get(buf.buffer);
  return s !== undefined && s.refs > 0;
}

/**
 * The whole slab when `buf` is a pooled payload that starts where reads put
 * it (SLAB_HEADROOM in): its framing may be written in the room in front.
 * Undefined otherwise (a later piece of a split chunk has bytes in front).
 */
export function slabWithRoom(buf: Buffer): Buffer | undefined {
  const s = states.get(buf.buffer);
  if (s === undefined || s.refs <= 0 || !s.pool.framingRoom || buf.byteOffset !== s.slab.byteOffset + SLAB_HEADROOM) return undefined;
  return s.slab;
}

/** One more holder of the slab `buf` views (no-op for other Buffers). */
export function retainSlab(buf: Buffer): void {
  const s = states.get(buf.buffer);
  if (s === undefined) return;
  if (s.refs <= 0) throw new InternalError('a pooled slab was retained after it went back to its pool');
  s.refs++;
}

/** One holder fewer; the last puts the slab back in its pool (no-op for other Buffers). */
export function releaseSlab(buf: Buffer): void {
  const s = states.get(buf.buffer);
  if (s === undefined) return;
  if (s.refs <= 0) throw new InternalError('a pooled slab was released more often than retained');
  if (--s.refs === 0) s.pool.giveBack(s);
}

/** A view keeps at most this many bytes of memory alive per byte it holds, once it has gone through holdable(). */
export const MAX_HELD_PER_BYTE = 4;

const NOTHING = Buffer.alloc(0);

/**
 * What to keep of a received payload that is going to wait (in a socket's
 * write queue, a stream's buffer): a view keeps the whole memory it views
 * alive, and the queues are bounded by the bytes they count (windows,
 * high-water marks), not by that memory. A 1-byte DATA payload read in a
 * 64 KiB HTTP/2 read keeps 64 KiB; a window of them, gigabytes (issue 33).
 * So a view smaller than 1/MAX_HELD_PER_BYTE of its memory is copied, into
 * memory of its own (not Node's shared 8 KiB pool, which one small copy would
 * keep whole): whatever waits then keeps at most about four bytes per byte
 * counted. Bulk payloads (a joined message, a pooled slab, a read of their
 * own) are at least that share of their memory and stay views.
 */
export function holdable(buf: Buffer): Buffer {
  if (buf.length * MAX_HELD_PER_BYTE >= buf.buffer.byteLength) return buf;
  if (buf.length === 0) return NOTHING;
  const copy = Buffer.allocUnsafeSlow(buf.length);
  buf.copy(copy);
  return copy;
}

/** What writeHolding writes to: a socket, an HTTP/2 stream, a tunnelled connection. */
export interface ChunkWriter {
  write(chunk: Buffer, cb?: (err?: Error | null) => void): boolean;
}

/**
 * `to.write(chunk)`, holding the pooled slab `held` views (by default the
 * chunk itself) until the write calls back, and then calling `after`. Node
 * calls back every write once, also one cut short by destroy(), so the slab
 * always comes back. Without a pooled slab it is a plain write.
 */
export function writeHolding(to: ChunkWriter, chunk: Buffer, held: Buffer = chunk, after?: () => void): boolean {
  const s = states.get(held.buffer);
  if (s === undefined || s.refs <= 0) return after === undefined ? to.write(chunk) : to.write(chunk, after);
  s.refs++;
  return to.write(chunk, () => {
    releaseSlab(held);
    after?.();
  });
}
