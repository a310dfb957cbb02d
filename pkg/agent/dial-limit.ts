// How many dials an agent runs at once, across all its server links. A
// DIAL_REQ beyond the limit is answered at once with an error, and counted.

export const DEFAULT_MAX_CONCURRENT_DIALS = 256;

export class DialLimit {
  private running = 0;
  /** Dials refused because the limit was reached (for metrics). */
  refused = 0;

  constructor(readonly max: number = DEFAULT_MAX_CONCURRENT_DIALS) {
    if (!Number.isInteger(max) || max < 1) throw new TypeError(`max concurrent dials must be a positive integer, got ${max}`);
  }

  get inFlight(): number {
    return this.running;
  }

  /** Takes a slot; false (and counted) when all are in use. */
  tryTake(): boolean {
    if (this.running >= this.max) {
      this.refused++;
      return false;
    }
    this.running++;
    return true;
  }

  release(): void {
    if (this.running > 0) this.running--;
  }
}
