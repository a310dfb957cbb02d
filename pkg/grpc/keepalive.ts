// Notices a silent HTTP/2 peer, for either end of a link: gRPC keepalive on
// the server and on an agent without session resume, and the resume agent's
// liveness watch (a dark path noticed within the resume window, not after the
// minute gRPC keepalive takes). A PING once nothing has arrived from the peer
// for an interval, and `onTimeout` when nothing at all arrives for `timeoutMs`
// after it. One unref'd timer; stop(), which the link's close path calls,
// clears it.
//
// As grpc-go does, a peer that is talking is not pinged: any frame read proves
// the path works (a busy link, or an agent pinging for its own liveness check,
// costs no ping of ours). And an answer late behind the data the peer is
// sending counts nothing against it: anything heard after the ping is as good
// (a slow edge uplink can hold seconds of it). What arrived is read from the
// transport's byte count at each look, not noted per frame, so the packet path
// pays nothing; the price is precision: a look every half interval, so the
// ping goes out between one and one and a half intervals after the peer was
// last heard (grpc-go: exactly one). A peer that is always heard would never
// be pinged and its round trip (shown in /debug/agents) never measured, so
// `measureEveryMs` pings it that often anyway.
//
// Each wait is the interval plus up to a tenth more, at random. Links that
// connected together (every agent back at once after a server restart) would
// otherwise ping in step for their whole life: 1,000 pings in one timer turn
// stall the server's event loop ~13 ms every interval (npm run bench -- scale,
// 1,000 agent links). Only longer, never shorter: a peer's ping policy (grpc-go's
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

/** What keepalive pings through: an HTTP/2 session, or a WebSocket's ping/pong (pkg/grpc/ws-pings.ts). */
export interface Pingable {
  readonly destroyed: boolean;
  /** Sends a ping; `cb` gets its round trip. False when it cannot go out now. */
  ping(cb: (err: Error | null, durationMs: number) => void): boolean;
}

export interface KeepaliveOptions {
  /** Read before each wait, so that a client can back off (too_many_pings). */
  intervalMs: () => number;
  /** Nothing at all arrived this long after a ping: the peer is gone. */
  timeoutMs: number;
  /** A count that grows whenever anything arrives from the peer (transportBytesRead). */
  received: () => number;
  /** Ping a peer that is heard all the time this often anyway, to keep `lastRoundTripMs` fresh. Default never. */
  measureEveryMs?: number;
  /** Ping once at start, so that `minRoundTripMs` is known before the link is busy (flow control sizes windows by it). */
  measureAtStart?: boolean;
  /** Clock, for tests. Default performance.now. */
  now?: () => number;
  /** The peer answered nothing in time; called once, with how long nothing was heard (at least). The link should be dropped. */
  onTimeout: (silentMs: number) => void;
}

interface AwaitedPing {
  id: number;
  sentAt: number;
  /** `received()` when it went out: anything more is an answer. */
  receivedBefore: number;
}

export class Keepalive {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** `received()` at the last look. */
  private receivedBefore = 0;
  /** The look (or the answer) at which the peer was last heard. */
  private heardAt = 0;
  /** When the ping is due if the peer stays silent. */
  private pingAt = 0;
  /** Between looks while no ping is out: half the wait. */
  private lookEveryMs = 1;
  private lastPingAt = -Infinity;
  /** Numbers the pings sent, so that an answer arriving after its wait was settled otherwise changes nothing. */
  private pingsSent = 0;
  private awaited: AwaitedPing | undefined;
  private readonly now: () => number;

  constructor(
    private readonly session: Pingable,
    private readonly opts: KeepaliveOptions,
  ) {
    if (!(opts.timeoutMs > 0)) throw new TypeError(`invalid keepalive timeout ${opts.timeoutMs}`);
    this.now = opts.now ?? (() => performance.now());
  }

  /** Round trip of the last answered ping, in milliseconds. */
  lastRoundTripMs: number | undefined;
  /** The smallest round trip answered: the path's own, without the queues of a busy moment. */
  minRoundTripMs: number | undefined;

  start(): void {
    if (this.stopped || this.timer !== undefined) return;
    const now = this.now();
    this.heard(now);
    if (this.opts.measureAtStart === true) this.ping(now);
    this.armNext(now);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  /** The peer was heard (or the watch starts): the ping is due one wait from now. */
  private heard(now: number, received = this.opts.received()): void {
    this.receivedBefore = received;
    this.heardAt = now;
    this.due(now);
  }

  private due(now: number): void {
    const wait = keepaliveDelay(this.opts.intervalMs(), Math.random());
    this.pingAt = now + wait;
    this.lookEveryMs = Math.ceil(wait / 2);
  }

  private look(): void {
    this.timer = undefined;
    if (this.stopped || this.session.destroyed) return;
    const now = this.now();
    const received = this.opts.received();
    const talked = received !== this.receivedBefore;
    if (talked) this.heard(now, received);
    const awaited = this.awaited;
    if (awaited !== undefined) {
      if (now - awaited.sentAt >= this.opts.timeoutMs) {
        this.awaited = undefined;
        if (received === awaited.receivedBefore) {
          this.stop();
          this.opts.onTimeout(now - this.heardAt);
          return;
        }
      }
    } else if (talked) {
      const every = this.opts.measureEveryMs;
      if (every !== undefined && now - this.lastPingAt >= every) this.ping(now);
    } else if (now >= this.pingAt) {
      this.ping(now);
    }
    this.armNext(now);
  }

  /** The next look: the ping's deadline while one is out, else the next half wait or the due time. */
  private armNext(now: number): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    const awaited = this.awaited;
    const at = awaited !== undefined ? awaited.sentAt + this.opts.timeoutMs : Math.min(this.pingAt, now + this.lookEveryMs);
    this.timer = setTimeout(() => this.look(), Math.max(1, Math.ceil(at - now)));
    this.timer.unref();
  }

  private ping(now: number): void {
    const id = ++this.pingsSent;
    this.lastPingAt = now;
    this.awaited = { id, sentAt: now, receivedBefore: this.opts.received() };
    const sent = this.session.ping((err, durationMs) => this.answered(id, err, durationMs));
    // Too many pings in flight already: try again one wait later.
    if (!sent && this.isAwaited(id)) this.notAwaited(now);
  }

  /** Whether ping `id` is the one awaited (a stand-in session may have answered it already). */
  private isAwaited(id: number): boolean {
    return this.awaited?.id === id;
  }

  private answered(id: number, err: Error | null, durationMs: number): void {
    if (!err) {
      this.lastRoundTripMs = durationMs;
      this.minRoundTripMs = Math.min(durationMs, this.minRoundTripMs ?? Infinity);
    }
    if (this.stopped || !this.isAwaited(id)) return;
    const now = this.now();
    if (err) this.notAwaited(now);
    else {
      this.awaited = undefined;
      this.heard(now);
      this.armNext(now);
    }
  }

  private notAwaited(now: number): void {
    this.awaited = undefined;
    this.due(now);
    this.armNext(now);
  }
}
