// The memory one server's resumable agent links share for session resume
// (--resume-memory-budget): the DATA every server-side ResendBuffer keeps
// until its agent acknowledges it, live links and suspended sessions alike.
// The per-link cap (resend-buffer.ts) bounds one link; this bounds them all.
//
// A buffer charges what it keeps and releases it once, when it is
// acknowledged or let go (the session ended). Once the budget is spent, the
// writers of every link that keeps at least an equal share of it (the budget
// divided by the links keeping anything) wait after their packet
// (back-pressure: nothing is dropped), and those links wait here for room or
// for their own acknowledgements. Links below an equal share go on: a few
// agents that never acknowledge (a valid certificate is all that takes) can
// spend the budget, but cannot stop the links of agents that do. A suspended
// session cannot free its share (no transport brings acknowledgements), so
// while the budget is spent the owner is asked (onExhausted) to expire
// suspended sessions, oldest first; live links are never expired, they wait.
//
// What is kept may pass the budget by one packet per writer (a packet is taken
// before its writer is told to wait), and by what the links below an equal
// share add while it is spent: less than the budget again, together.
//
// Waking and onExhausted run on a microtask, never inside charge() or
// release(): those are called from inside a buffer's own bookkeeping.

/** Eight links at the per-link cap (32 MiB), sixteen with their HTTP/2 window (16 MiB) in flight. */
export const DEFAULT_RESUME_MEMORY_BUDGET = 256 * 1024 * 1024;

export interface ResumeBudgetOptions {
  /** The budget is spent: free some of it if you can (expire suspended sessions). */
  onExhausted?: () => void;
}

export class ResumeBudget {
  readonly limit: number;
  private usedBytes = 0;
  /** Links keeping anything now. */
  private holders = 0;
  private peakBytes = 0;
  private waitCount = 0;
  /** Links with writers waiting for room, in the order they began to wait. */
  private readonly waiters = new Set<() => void>();
  private scheduled = false;
  private readonly onExhausted: (() => void) | undefined;

  constructor(limit: number, opts: ResumeBudgetOptions = {}) {
    if (!Number.isSafeInteger(limit) || limit < 1) throw new TypeError(`the resume memory budget must be a positive number of bytes, got ${limit}`);
    this.limit = limit;
    this.onExhausted = opts.onExhausted;
  }

  /** DATA bytes kept unacknowledged now, by every link together. */
  get used(): number {
    return this.usedBytes;
  }

  /** The most ever kept at once (for tests and /debug). */
  get peak(): number {
    return this.peakBytes;
  }

  /** Times a link's writers began to wait for room. */
  get waits(): number {
    return this.waitCount;
  }

  /** Nothing more fits: writers wait. */
  get exhausted(): boolean {
    return this.usedBytes >= this.limit;
  }

  /** `bytes` more kept by a link that now keeps `held` in all. */
  charge(bytes: number, held = bytes): void {
    if (bytes > 0 && held === bytes) this.holders++;
    this.usedBytes += bytes;
    if (this.usedBytes > this.peakBytes) this.peakBytes = this.usedBytes;
    if (this.exhausted && this.onExhausted !== undefined) this.schedule();
  }

  /** `bytes` let go by a link that now keeps `held`. */
  release(bytes: number, held = 0): void {
    if (bytes > 0 && held === 0) this.holders--;
    this.usedBytes -= bytes;
    if (this.waiters.size > 0 && !this.exhausted) this.schedule();
  }

  /** Whether a link keeping `held` must wait: the budget is spent and it keeps at least an equal share of it. */
  mustWait(held: number): boolean {
    return this.exhausted && held >= this.limit / Math.max(1, this.holders);
  }

  /** `wake` runs once there is room again (each link waits once, however many writers it holds). */
  waitForRoom(wake: () => void): void {
    if (this.waiters.has(wake)) return;
    this.waitCount++;
    this.waiters.add(wake);
    if (!this.exhausted) this.schedule();
  }

  /** The link is closed: it waits no more. */
  cancelWait(wake: () => void): void {
    this.waiters.delete(wake);
  }

  /** Asks onExhausted again if the budget is spent (a session was just suspended and may free it). */
  recheck(): void {
    if (this.exhausted && this.onExhausted !== undefined) this.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => this.settle());
  }

  private settle(): void {
    // Cleared first: what happens below (a woken writer spending the budget again) asks for another turn.
    this.scheduled = false;
    if (this.exhausted) this.onExhausted?.();
    // Oldest waiter first; a link that fills the budget again waits at the back.
    for (const wake of [...this.waiters]) {
      if (this.exhausted) break;
      this.waiters.delete(wake);
      wake();
    }
  }
}
