// A caller's way to give up one pending dial. An AbortController and its
// listener cost a dial more than the rest of its bookkeeping (an EventTarget,
// an Event, a listener record: ~5 % of a new connection's CPU on each side);
// a dial has one caller and one thing to stop, so a plain callback does.

export class Cancel {
  private cancelled = false;
  private onCancel: (() => void) | undefined;

  get isCancelled(): boolean {
    return this.cancelled;
  }

  /** Gives up: the registered callback runs once, now. Idempotent. */
  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    const f = this.onCancel;
    this.onCancel = undefined;
    f?.();
  }

  /** Runs `f` on cancel (at once if already cancelled). One callback at a time: a later one replaces it. */
  listen(f: () => void): void {
    if (this.cancelled) {
      f();
      return;
    }
    this.onCancel = f;
  }

  /** Forgets the callback (the work finished). */
  clear(): void {
    this.onCancel = undefined;
  }
}
