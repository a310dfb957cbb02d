// Runs one sync function at a time, as kube-proxy's bounded-frequency runner:
// requests are coalesced (a burst of watch events is one sync), syncs start at
// most once per `minIntervalMs`, a full sync comes every `periodMs`, and a
// failed sync is retried with a doubling delay up to the period.

export interface SyncRunnerOptions {
  minIntervalMs: number;
  periodMs: number;
  /** First retry after a failure; doubles up to periodMs. */
  retryMs: number;
}

/** `full`: compare with the system even if nothing changed here (the periodic check, a retry). */
export type SyncFn = (full: boolean) => Promise<void>;

export class SyncRunner {
  private stopping: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private periodTimer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private pending = false;
  private pendingFull = false;
  private lastStart = -Infinity;
  private failures = 0;
  private stopped = false;

  constructor(
    private readonly fn: SyncFn,
    private readonly opts: SyncRunnerOptions,
  ) {}

  /** Starts the periodic full sync and runs one now. */
  start(): void {
    if (this.stopped || this.periodTimer !== undefined) return;
    this.periodTimer = setInterval(() => this.request(true), this.opts.periodMs);
    this.periodTimer.unref();
    this.request(true);
  }

  /** Asks for a sync soon; requests made before it starts are one sync. */
  request(full = false): void {
    if (this.stopped) return;
    this.pending = true;
    this.pendingFull ||= full;
    if (this.running === undefined) this.schedule(Math.max(0, this.lastStart + this.opts.minIntervalMs - performance.now()));
  }

  private schedule(delayMs: number): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.runNow();
    }, delayMs);
    this.timer.unref();
  }

  private runNow(): void {
    if (this.stopped || !this.pending) return;
    const full = this.pendingFull;
    this.pending = false;
    this.pendingFull = false;
    this.lastStart = performance.now();
    this.running = this.fn(full).then(
      () => {
        this.failures = 0;
      },
      () => {
        // The sync logged why; try again, comparing with the system.
        this.failures++;
        this.pending = true;
        this.pendingFull = true;
      },
    );
    void this.running.then(() => {
      this.running = undefined;
      if (this.stopped || !this.pending) return;
      const retry = this.failures > 0 ? Math.min(this.opts.retryMs * 2 ** (this.failures - 1), this.opts.periodMs) : 0;
      this.schedule(Math.max(retry, this.lastStart + this.opts.minIntervalMs - performance.now()));
    });
  }

  /** No more syncs; waits for one that is running. Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.periodTimer);
    this.timer = undefined;
    await this.running;
  }
}
