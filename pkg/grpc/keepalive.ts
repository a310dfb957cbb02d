// gRPC keepalive over node:http2, for either end of a connection: a PING once
// nothing has arrived from the peer for `intervalMs`, and `onTimeout` when it
// goes unanswered for `timeoutMs` with nothing else arriving meanwhile. Both
// timers are unref'd and cleared by stop(), which the connection's close path
// calls.
//
// As grpc-go does, a connection the peer is talking on is not pinged: any frame
// read proves the path works (a busy link, or an agent pinging for its own
// liveness check, costs no ping of ours). What arrived is read from the
// transport's byte count at a look every half interval, not noted per frame,
// so the hot path pays nothing; the price is precision: the ping goes out
// between one and one and a half intervals after the peer was last heard
// (grpc-go: exactly one). A peer that is always heard would never be pinged
// and its round trip (shown in /debug/agents) never measured, so `measureEveryMs`
// pings it that often anyway.
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

/** What the session has read from its transport so far, in bytes (every frame counts: DATA, PING, its ACK, SETTINGS). */
export function transportBytesRead(session: Http2Session): () => number {
  // Once destroyed the session has no socket to ask (node:http2 throws); its keepalive is stopping anyway.
  return () => (session.destroyed ? 0 : session.socket.bytesRead);
}

export interface KeepaliveOptions {
  /** Read before each ping, so that a client can back off (too_many_pings). */
  intervalMs: () => number;
  /** A count that grows whenever anything arrives from the peer (transportBytesRead). Without it every interval pings. */
  received?: () => number;
  /** With `received`: ping a peer that is heard all the time this often anyway, to keep `lastRoundTripMs` fresh. Default never. */
  measureEveryMs?: number;
  /** Clock, for tests. Default performance.now. */
  now?: () => number;
  timeoutMs: number;
  /** The peer did not answer a ping in time; the connection should be dropped. */
  onTimeout: () => void;
}

export class Keepalive {
  private intervalTimer: NodeJS.Timeout | undefined;
  private timeoutTimer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** `received()` at the last look. */
  private receivedBefore = 0;
  /** When the ping is due if the peer stays silent. */
  private pingAt = 0;
  /** When the last ping went out. */
  private lastPingAt = -Infinity;
  /** Numbers the pings sent, so that an answer arriving after its wait was settled otherwise changes nothing. */
  private pingsSent = 0;
  /** The number of the ping whose answer is awaited; 0 when none is. */
  private awaited = 0;
  private readonly received: (() => number) | undefined;
  private readonly now: () => number;

  constructor(
    private readonly session: Http2Session,
    private readonly opts: KeepaliveOptions,
  ) {
    this.received = opts.received;
    this.now = opts.now ?? (() => performance.now());
  }

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

  /** The peer was heard (or the keepalive starts): the ping is due one interval from now. */
  private schedule(): void {
    if (this.stopped) return;
    const wait = keepaliveDelay(this.opts.intervalMs(), Math.random());
    if (this.received === undefined) {
      this.arm(wait);
      return;
    }
    this.receivedBefore = this.received();
    this.pingAt = this.now() + wait;
    this.arm(Math.ceil(wait / 2));
  }

  private arm(ms: number): void {
    this.intervalTimer = setTimeout(() => this.look(), ms);
    this.intervalTimer.unref();
  }

  /** Ping when due, unless something arrived since the last look: then the wait starts again. */
  private look(): void {
    this.intervalTimer = undefined;
    if (this.stopped || this.session.destroyed) return;
    if (this.received === undefined) return this.ping();
    if (this.received() !== this.receivedBefore) {
      const every = this.opts.measureEveryMs;
      if (every !== undefined && this.now() - this.lastPingAt >= every) return this.ping();
      return this.schedule();
    }
    const left = this.pingAt - this.now();
    if (left > 0) this.arm(Math.ceil(left));
    else this.ping();
  }

  private ping(): void {
    const { session } = this;
    if (this.stopped || session.destroyed) return;
    const id = ++this.pingsSent;
    this.awaited = id;
    this.lastPingAt = this.now();
    const receivedBefore = this.received?.();
    this.timeoutTimer = setTimeout(() => {
      this.timeoutTimer = undefined;
      if (this.stopped || this.awaited !== id) return;
      this.awaited = 0;
      // The answer may be queued behind what the peer is sending: anything heard is as good.
      if (this.received !== undefined && this.received() !== receivedBefore) this.schedule();
      else this.opts.onTimeout();
    }, this.opts.timeoutMs);
    this.timeoutTimer.unref();
    const sent = session.ping((err, durationMs) => {
      if (!err) this.lastRoundTripMs = durationMs;
      if (this.awaited !== id) return;
      this.awaited = 0;
      clearTimeout(this.timeoutTimer);
      this.timeoutTimer = undefined;
      if (!err) this.schedule();
    });
    if (!sent) {
      // Too many pings in flight already; try again later.
      this.awaited = 0;
      clearTimeout(this.timeoutTimer);
      this.timeoutTimer = undefined;
      this.schedule();
    }
  }
}
