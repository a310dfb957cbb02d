// A controller's work queue, as client-go's: event handlers add a key, one
// worker syncs it. A key added while it waits is queued once; a key added
// while it is being synced is synced again afterwards. A failed sync is
// retried with backoff, up to a bound; the next event or resync brings it back.

import { Backoff, type BackoffOptions } from '../timers/backoff.js';
import type { Logger } from '../log/logger.js';
import { apiErrorMessage } from './errors.js';

export interface WorkQueueOptions {
  /** What the queue serves, for log lines. */
  name: string;
  /** Brings one key's state in line; throws to be retried. */
  sync(key: string): Promise<void>;
  /** Retries of one key before it is dropped until its next event. Default 15 (OpenYurt's). */
  maxRetries?: number;
  backoff?: BackoffOptions;
  logger: Logger;
}

const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 50, factor: 2, jitter: 0.2, capMs: 30_000 };

export class WorkQueue {
  private stopping: Promise<void> | undefined;
  private readonly pending = new Set<string>();
  private readonly retryTimers = new Map<string, NodeJS.Timeout>();
  private readonly failures = new Map<string, { count: number; backoff: Backoff }>();
  private readonly maxRetries: number;
  private readonly log: Logger;
  private worker: Promise<void> | undefined;
  private stopped = false;

  constructor(private readonly opts: WorkQueueOptions) {
    this.maxRetries = opts.maxRetries ?? 15;
    this.log = opts.logger.child({ queue: opts.name });
  }

  /** Queues `key` (once, however often it is added before the worker takes it). */
  add(key: string): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimers.get(key));
    this.retryTimers.delete(key);
    this.pending.add(key);
    this.worker ??= this.work();
  }

  get length(): number {
    return this.pending.size;
  }

  /** Drops what is queued and waits for the sync in progress. Final. Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    this.pending.clear();
    for (const timer of this.retryTimers.values()) clearTimeout(timer);
    this.retryTimers.clear();
    await this.worker;
  }

  private async work(): Promise<void> {
    // Let the events of one burst (an informer's list, a handler's loop) all land first: one sync serves them.
    await new Promise((resolve) => setImmediate(resolve));
    while (!this.stopped && this.pending.size > 0) {
      const key = this.pending.values().next().value as string;
      this.pending.delete(key);
      try {
        await this.opts.sync(key);
        this.failures.delete(key);
      } catch (err: unknown) {
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run during the sync
        if (!this.stopped) this.retry(key, err);
      }
    }
    this.worker = undefined;
  }

  private retry(key: string, err: unknown): void {
    let f = this.failures.get(key);
    if (f === undefined) {
      f = { count: 0, backoff: new Backoff(this.opts.backoff ?? DEFAULT_BACKOFF) };
      this.failures.set(key, f);
    }
    f.count++;
    if (f.count > this.maxRetries) {
      this.failures.delete(key);
      this.log.error('sync failed too often; dropped until the next change or resync', { key, failures: f.count, error: apiErrorMessage(err) });
      return;
    }
    const delay = f.backoff.next();
    this.log.warn('sync failed; retrying', { key, failures: f.count, retryInMs: Math.round(delay), error: apiErrorMessage(err) });
    const timer = setTimeout(() => {
      this.retryTimers.delete(key);
      this.add(key);
    }, delay);
    timer.unref();
    this.retryTimers.set(key, timer);
  }
}
