// Waiting, with a deadline, for something to be idle (no connection left
// open, no dial pending): on the events that can make it so, not by polling.
// The owner says when its count may have dropped; the waiters look then.

import { sleep } from './sleep.js';

export class IdleWaiters {
  private readonly wakers = new Set<() => void>();

  constructor(private readonly count: () => number) {}

  /** Resolves true once the count is 0, false if `ms` passes first (a grace period: ref'd). */
  async wait(ms: number): Promise<boolean> {
    if (this.count() === 0) return true;
    const idle = new AbortController();
    const wake = (): void => {
      if (this.count() === 0) idle.abort();
    };
    this.wakers.add(wake);
    try {
      await sleep(ms, idle.signal, { ref: true });
    } finally {
      this.wakers.delete(wake);
    }
    return this.count() === 0;
  }

  /** Called by the owner whenever the count may have dropped; cheap while nobody waits. */
  check(): void {
    for (const wake of this.wakers) wake();
  }
}
