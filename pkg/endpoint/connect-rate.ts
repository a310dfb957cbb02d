// A token bucket for admitting agent streams: `perSecond` on average, up to
// `burst` at once. After a server restart every agent redials together; the
// excess is refused with a retryable status and comes back after its backoff.

export class ConnectRate {
  private tokens: number;
  private last: number;

  constructor(
    readonly perSecond: number,
    readonly burst: number = perSecond,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(perSecond > 0) || !(burst >= 1)) throw new TypeError(`invalid connect rate ${perSecond}/s, burst ${burst}`);
    this.tokens = burst;
    this.last = now();
  }

  /** Takes one admission if there is one. */
  tryTake(): boolean {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.perSecond);
    this.last = t;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
