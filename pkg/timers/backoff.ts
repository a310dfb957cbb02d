// Jittered exponential backoff: initial, ×factor per failure, capped, each
// delay stretched by up to `jitter` of itself so that agents restarted together
// do not redial together. With `fullJitter` each delay is drawn uniformly from
// (0, current] instead: after a server restart hundreds of agents then spread
// over the whole interval rather than arriving in waves.

export interface BackoffOptions {
  initialMs: number;
  factor: number;
  /** 0.1 = up to +10 %. */
  jitter: number;
  capMs: number;
  /** Draw each delay from (0, current] (the jitter fraction is then unused). */
  fullJitter?: boolean;
  /** Random source in [0, 1); for tests. */
  random?: () => number;
}

/** `ms` stretched by up to `jitter` of itself (0.1 = up to +10 %), never shortened; `random` in [0, 1). */
export function stretchedMs(ms: number, jitter: number, random: number): number {
  return ms * (1 + jitter * random);
}

/** The shortest full-jitter delay: a retry never comes back within the same millisecond. */
const MIN_FULL_JITTER_MS = 10;

export class Backoff {
  private current: number;
  private readonly random: () => number;

  constructor(private readonly opts: BackoffOptions) {
    const finite = [opts.initialMs, opts.factor, opts.jitter, opts.capMs].every(Number.isFinite);
    if (!finite || opts.initialMs <= 0 || opts.factor < 1 || opts.capMs < opts.initialMs || opts.jitter < 0) {
      throw new TypeError(`invalid backoff ${JSON.stringify(opts)}`);
    }
    this.current = opts.initialMs;
    this.random = opts.random ?? Math.random;
  }

  /** The delay to wait now; the next call returns a longer one, up to the cap. */
  next(): number {
    const delay = this.opts.fullJitter === true ? Math.max(MIN_FULL_JITTER_MS, this.current * this.random()) : this.jittered(this.current);
    this.current = Math.min(this.current * this.opts.factor, this.opts.capMs);
    return delay;
  }

  reset(): void {
    this.current = this.opts.initialMs;
  }

  jittered(ms: number): number {
    return stretchedMs(ms, this.opts.jitter, this.random());
  }
}
