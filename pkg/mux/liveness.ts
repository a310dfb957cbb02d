// Notices a link that went silent, soon and without false alarms on a busy
// one: a ping only after `idleMs` with nothing received, and the link is dead
// only when nothing at all has arrived for `timeoutMs` after that ping. A
// link carrying traffic is alive by that traffic, however long its own pings
// wait behind the data it is sending (a slow edge uplink can hold seconds of
// it). For session resume, where the agent must notice a dark path within the
// window, not after the minute gRPC keepalive takes.
//
// received() only records the time: no timer work per packet. One unref'd
// timer per link, re-armed when it fires.

export interface LivenessOptions {
  /** Ping after this long without anything received. */
  idleMs: number;
  /** Dead when nothing has arrived this long after a ping went out. */
  timeoutMs: number;
  /** Sends a ping (its answer must reach received()); false if it could not be sent (tried again later). */
  ping(): boolean;
  /** Nothing arrived for `silentMs`, a ping included: the link is dead. Called once. */
  onDead(silentMs: number): void;
  /** Clock in ms; for tests. */
  now?: () => number;
}

export class LivenessWatch {
  private readonly opts: LivenessOptions;
  private readonly now: () => number;
  private lastReceived: number;
  /** When the ping now awaited went out, or undefined. */
  private pingSentAt: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(opts: LivenessOptions) {
    if (!(opts.idleMs > 0) || !(opts.timeoutMs > 0)) throw new TypeError(`invalid liveness timings ${opts.idleMs}/${opts.timeoutMs}`);
    this.opts = opts;
    this.now = opts.now ?? (() => performance.now());
    this.lastReceived = this.now();
  }

  start(): void {
    if (this.stopped || this.timer !== undefined) return;
    this.lastReceived = this.now();
    this.arm(this.opts.idleMs);
  }

  /** Anything arrived from the peer: a packet, a ping's answer. */
  received(): void {
    this.lastReceived = this.now();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(ms: number): void {
    this.timer = setTimeout(() => this.check(), Math.max(1, ms));
    this.timer.unref();
  }

  private check(): void {
    this.timer = undefined;
    if (this.stopped) return;
    const now = this.now();
    const { idleMs, timeoutMs } = this.opts;
    if (this.pingSentAt !== undefined) {
      if (this.lastReceived >= this.pingSentAt) {
        this.pingSentAt = undefined; // alive: the ping's answer or other traffic came
      } else if (now - this.pingSentAt >= timeoutMs) {
        this.stop();
        this.opts.onDead(now - this.lastReceived);
        return;
      } else {
        this.arm(this.pingSentAt + timeoutMs - now);
        return;
      }
    }
    const idle = now - this.lastReceived;
    if (idle < idleMs) {
      this.arm(idleMs - idle);
      return;
    }
    if (this.opts.ping()) {
      this.pingSentAt = now;
      this.arm(timeoutMs);
    } else {
      this.arm(idleMs);
    }
  }
}
