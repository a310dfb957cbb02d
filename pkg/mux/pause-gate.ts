// Pauses a shared stream while any of its connections has a full buffer, and
// resumes it when the last one drains. Each holder counts once, however often
// it asks, so a connection cannot leave the stream paused by asking twice.

export class PauseGate {
  private readonly holders = new Set<object>();

  constructor(
    private readonly pause: () => void,
    private readonly resume: () => void,
  ) {}

  hold(holder: object): void {
    if (this.holders.has(holder)) return;
    this.holders.add(holder);
    if (this.holders.size === 1) this.pause();
  }

  release(holder: object): void {
    if (!this.holders.delete(holder)) return;
    if (this.holders.size === 0) this.resume();
  }

  get paused(): boolean {
    return this.holders.size > 0;
  }

  /** Forgets every holder without resuming (the stream is going away). */
  clear(): void {
    this.holders.clear();
  }
}
