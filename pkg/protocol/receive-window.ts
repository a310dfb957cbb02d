// The receiving side of one connection's flow control: how much the peer may
// have sent, when to grant more, and how wide the window should be.
//
// The window is sized by how long it takes to drain at the rate the reader
// has just taken bytes. Over a fast path a whole window drains in
// milliseconds, and a reader that keeps up is waiting on the window: it
// widens (bulk copies over long paths need more in flight). Over a slow edge
// link the same window is seconds of data queued in the link's socket in
// front of every other connection of the node (a 4 MiB window at 2 Mbit/s is
// 16 s: an exec keystroke waits behind a log download that long); there it
// narrows to what the link moves in about a quarter of a second, or a few
// round trips on a long path (less would leave the flow bound by its window).
// Narrowing takes nothing back: what was granted stays granted, and the
// next grants are smaller until the peer's allowance fits the new window.

/** The widest a window grows while its reader keeps up. */
export const MAX_AUTO_WINDOW = 4 * 1024 * 1024;

/** The narrowest a window gets on a slow path (or the announced window, if smaller). */
export const MIN_AUTO_WINDOW = 64 * 1024;

/**
 * The thresholds, in milliseconds for the window to drain at the rate just
 * measured, scale with the path's round trip (R): a window that drains within
 * max(200 ms, 2R) may widen (over a long path a window-bound flow drains in
 * about R); one that takes longer than max(500 ms, 4R) narrows to max(250 ms,
 * 3R) of data, never less than a round trip's worth. Until the link has
 * measured R, it is taken as ASSUMED_RTT_MS: narrowing then stops at 750 ms.
 */
export const WIDEN_BELOW_MS = 200;
export const NARROW_ABOVE_MS = 500;
export const NARROW_TO_MS = 250;
export const ASSUMED_RTT_MS = 250;

/**
 * The readable buffer's high-water mark for a reader behind a window announced
 * as `announced` (a Duplex, whose _read is where grants go out). Node calls
 * _read once per push; one that grants nothing waits for the next push. Below
 * three quarters of the narrowest window a read always finds either a grant
 * due (the peer has used its credit) or credit the peer still holds, so the
 * next push comes: neither side waits on the other.
 */
export function readMarkFor(announced: number): number {
  return Math.max(1, Math.floor((3 * Math.min(announced, MIN_AUTO_WINDOW)) / 4));
}

/** The default clock: one function for every window, none made per connection. */
const monotonicMs = (): number => performance.now();

export class ReceiveWindow {
  /** The window now: what the peer may have in flight beyond what our reader took. */
  size: number;
  /** Bytes the peer may have sent in all: the announced window plus every grant. */
  private allowed: number;
  private readonly floor: number;
  /** When the last grant was weighed, and how much the reader had taken then. */
  private sampledAt: number;
  private takenAtSample = 0;

  /** `roundTripMs` reads the path's round trip (the link's smallest measured), undefined before one was; `now` is the clock, in ms. */
  constructor(
    announced: number,
    private readonly roundTripMs?: () => number | undefined,
    private readonly now: () => number = monotonicMs,
  ) {
    this.size = announced;
    this.allowed = announced;
    this.floor = Math.min(announced, MIN_AUTO_WINDOW);
    this.sampledAt = now();
  }

  /** True once the peer has sent more than it was ever allowed: it ignores our window. */
  exceeded(received: number): boolean {
    return received > this.allowed;
  }

  /**
   * The bytes to grant now, 0 for none: `taken` is everything our reader has
   * taken so far; `keepsUp` says it is waiting on the window (its buffer is
   * empty), so widening would help it. Grants go in batches of a quarter window.
   */
  grant(taken: number, keepsUp: boolean): number {
    if (taken + this.size - this.allowed < this.size / 4) return 0;
    const now = this.now();
    const bytes = taken - this.takenAtSample;
    const elapsed = now - this.sampledAt;
    this.sampledAt = now;
    this.takenAtSample = taken;
    if (bytes > 0) {
      const drainMs = (this.size * elapsed) / bytes;
      const rtt = this.roundTripMs?.() ?? ASSUMED_RTT_MS;
      if (drainMs <= Math.max(WIDEN_BELOW_MS, 2 * rtt)) {
        if (keepsUp) this.size = Math.min(this.size * 2, Math.max(this.size, MAX_AUTO_WINDOW));
      } else if (drainMs > Math.max(NARROW_ABOVE_MS, 4 * rtt)) {
        const target = (bytes * Math.max(NARROW_TO_MS, 3 * rtt)) / elapsed;
        this.size = Math.max(this.floor, Math.min(this.size, Math.round(target)));
      }
    }
    const due = taken + this.size - this.allowed;
    if (due <= 0) return 0;
    this.allowed += due;
    return due;
  }
}
