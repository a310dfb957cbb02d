// Packets an agent sends for connections it does not hold on its stream:
// DATA or CLOSE_RSP for a connectID that is neither open nor recently closed,
// DIAL_RSP for a dial that is not pending on it. A few are a race (a dial we
// gave up on), many are an agent that is broken or hostile: past `limit` in
// one window the tunnel ends the agent's stream.

/** Window over which packets for unknown connections are counted. */
export const UNKNOWN_PACKET_WINDOW_MS = 10_000;
/** Packets for unknown connections an agent may send in one window by default. */
export const DEFAULT_MAX_UNKNOWN_PACKETS = 1000;

export class UnknownPackets {
  private windowStart = 0;
  private inWindow = 0;
  /** Answers to dials we gave up on (timed out or cancelled) that may still come: they do not count. */
  private expectedLateAnswers = 0;

  constructor(
    /** 0 turns the limit off. */
    readonly limit: number,
    readonly windowMs = UNKNOWN_PACKET_WINDOW_MS,
  ) {}

  /** A dial on this stream was given up: its DIAL_RSP may still arrive. */
  dialAbandoned(): void {
    this.expectedLateAnswers++;
  }

  /** A DIAL_RSP for no pending dial: true if it answers one we gave up on. */
  takeLateAnswer(): boolean {
    if (this.expectedLateAnswers === 0) return false;
    this.expectedLateAnswers--;
    return true;
  }

  /** Counts one packet; returns how many the current window holds when that is over the limit, else 0. */
  add(now = Date.now()): number {
    if (now - this.windowStart >= this.windowMs) {
      this.windowStart = now;
      this.inWindow = 0;
    }
    this.inWindow++;
    return this.limit > 0 && this.inWindow > this.limit ? this.inWindow : 0;
  }
}
