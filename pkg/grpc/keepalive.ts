// gRPC keepalive over node:http2, for either end of a connection: a PING
// `intervalMs` after the previous one was answered, and `onTimeout` when one
// goes unanswered for `timeoutMs`. Both timers are unref'd and cleared by
// stop(), which the connection's close path calls.
//
// Each wait is the interval plus up to a tenth more, at random. Links that
// connected together (every agent back at once after a server restart) would
// otherwise ping in step for their whole life: 1,000 pings in one timer turn
// stall the server's event loop ~13 ms every interval (bench/README.md, "The
// scale table"). Only longer, never shorter: a peer's ping policy (grpc-go's
// MinTime, ours in ping-policy.ts) must never see pings sooner than agreed.

import type { Http2Session } from 'node:http2';
import { stretchedMs } from '../timers/backoff.js';

/** The largest share of the interval added to each wait. */
export const KEEPALIVE_JITTER = 0.1;

/** How long to wait before the next ping: `intervalMs` plus up to KEEPALIVE_JITTER of it, whole milliseconds; `random` in [0, 1). */
export function keepaliveDelay(intervalMs: number, random: number): number {
  return Math.floor(stretchedMs(intervalMs, KEEPALIVE_JITTER, random));
}

export interface KeepaliveOptions {
  /** Read before each ping, so that a client can back off (too_many_pings). */
  intervalMs: () => number;
  timeoutMs: number;
  /** The peer did not answer a ping in time; the connection should be dropped. */
  onTimeout: () => void;
}

export class Keepalive {
  private intervalTimer: NodeJS.Timeout | undefined;
  private timeoutTimer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly session: Http2Session,
    private readonly opts: KeepaliveOptions,
  ) {}

  /** Round trip of the last answered ping, in milliseconds. */
  lastRoundTripMs: number | undefined;

  start(): void {
    this.schedule();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.intervalTimer);
    clearTimeout(this.timeoutTimer);
    this.intervalTimer = undefined;
    this.timeoutTimer = undefined;
  }

  private schedule(): void {
    if (this.stopped) return;
    this.intervalTimer = setTimeout(() => this.ping(), keepaliveDelay(this.opts.intervalMs(), Math.random()));
    this.intervalTimer.unref();
  }

  private ping(): void {
    const { session } = this;
    if (this.stopped || session.destroyed) return;
    this.timeoutTimer = setTimeout(() => {
      this.timeoutTimer = undefined;
      if (!this.stopped) this.opts.onTimeout();
    }, this.opts.timeoutMs);
    this.timeoutTimer.unref();
    const sent = session.ping((err, durationMs) => {
      clearTimeout(this.timeoutTimer);
      this.timeoutTimer = undefined;
      if (!err) {
        this.lastRoundTripMs = durationMs;
        this.schedule();
      }
    });
    if (!sent) {
      // Too many pings in flight already; try again later.
      clearTimeout(this.timeoutTimer);
      this.timeoutTimer = undefined;
      this.schedule();
    }
  }
}
