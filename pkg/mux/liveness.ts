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
//
// Optionally, a `nudge` after `nudgeMs` of quiet (and every nudgeMs while it
// lasts): not a verdict, just a cheap way to let the transport report what it
// already knows. Node's HTTP/2 session stops reading its socket while one of
// its writes is under way, and when the peer resets the connection in the
// middle of a large write, the failed write may never be reported: the reset
// sits unread until reading starts again (see the agent's use).

export interface LivenessOptions {
  /** Ping after this long without anything received. */
  idleMs: number;
  /** Dead when nothing has arrived this long after a ping went out. */
  timeoutMs: number;
  /** Sends a ping (its answer must reach received()); false if it could not be sent (tried again later). */
  ping(): boolean;
  /** Nothing arrived for `silentMs`, a ping included: the link is dead. Called once. */
  onDead(silentMs: number): void;
  /** Called after `nudgeMs` without anything received, and again every nudgeMs while that lasts. */
  nudge?: () => void;
  /** Default: no nudge. */
  nudgeMs?: number;
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
    this.armOrNudge(this.opts.idleMs, this.lastReceived);
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

  /** Arms the timer for `ms`, or sooner for the next nudge while nothing arrives. */
  private armOrNudge(ms: number, now: number): void {
    const every = this.opts.nudgeMs;
    if (this.opts.nudge === undefined || every === undefined || !(every > 0)) {
      this.arm(ms);
      return;
    }
    const quiet = now - this.lastReceived;
    if (quiet >= every) this.opts.nudge();
    const untilNudge = quiet >= every ? every : every - quiet;
    this.arm(Math.min(ms, untilNudge));
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
        this.armOrNudge(this.pingSentAt + timeoutMs - now, now);
        return;
      }
    }
    const idle = now - this.lastReceived;
    if (idle < idleMs) {
      this.armOrNudge(idleMs - idle, now);
      return;
    }
    if (this.opts.ping()) {
      this.pingSentAt = now;
      this.armOrNudge(timeoutMs, now);
    } else {
      this.armOrNudge(idleMs, now);
    }
  }
}
