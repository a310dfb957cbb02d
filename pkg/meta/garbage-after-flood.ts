// One full garbage collection once a flood of connections has ended.
//
// Sockets that lived through a flood (slow heads, half-open TLS) are old
// objects to V8, and each holds native memory (its handle, TLS and parser
// state) until V8 collects it. A server that falls quiet after the flood
// allocates too little for V8 to run a full collection on its own, so that
// memory stayed taken for minutes (bench/flood.ts). When the open connections
// have fallen by `drop` or more since their peak, this asks V8 for one full
// collection through the inspector: at most one per interval, and never in a
// steady state, however busy. Re-measured (npm run bench -- flood, 1,800
// callers held 5 s, glibc malloc, twice each): 20 s after the flood the
// server's RSS was 131 and 125 MB with it, 145 and 140 MB without (76-77 %
// against 106-111 % over its level before). It stays
// (test/unit/tuning-fence.test.ts).

import { Session } from 'node:inspector';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';

/** A fall in open connections that counts as a flood that ended. */
export const DEFAULT_FLOOD_DROP = 1000;
export const DEFAULT_FLOOD_CHECK_INTERVAL_MS = 5000;

export interface GarbageAfterFloodOptions {
  /** Connections open now on every listener. */
  openConnections: () => number;
  /** Default DEFAULT_FLOOD_DROP. */
  drop?: number;
  /** Default DEFAULT_FLOOD_CHECK_INTERVAL_MS. */
  intervalMs?: number;
  /** Runs a full collection; default through the inspector. */
  collect?: () => Promise<void>;
  logger: Logger;
}

/** A full garbage collection through an in-process inspector session (no port is opened). */
export function collectGarbage(): Promise<void> {
  const session = new Session();
  session.connect();
  return new Promise<void>((resolve, reject) => {
    session.post('HeapProfiler.collectGarbage', (err) => {
      // Disconnecting inside the session's own callback never returns: do it on the next turn.
      setImmediate(() => {
        session.disconnect();
        if (err) reject(err);
        else resolve();
      });
    });
  });
}

export class GarbageAfterFlood {
  private readonly drop: number;
  private readonly intervalMs: number;
  private readonly collect: () => Promise<void>;
  private timer: NodeJS.Timeout | undefined;
  private peak = 0;
  private running = false;
  /** Collections run so far (for tests and /metrics). */
  collections = 0;

  constructor(private readonly opts: GarbageAfterFloodOptions) {
    this.drop = opts.drop ?? DEFAULT_FLOOD_DROP;
    this.intervalMs = opts.intervalMs ?? DEFAULT_FLOOD_CHECK_INTERVAL_MS;
    this.collect = opts.collect ?? collectGarbage;
  }

  start(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => void this.check(), this.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Reads the open connections; collects once if they fell by `drop` since their peak. */
  async check(): Promise<void> {
    if (this.running) return;
    const open = this.opts.openConnections();
    this.peak = Math.max(this.peak, open);
    if (this.peak - open < this.drop) return;
    const closed = this.peak - open;
    this.peak = open;
    this.running = true;
    const started = performance.now();
    const heapBefore = process.memoryUsage().heapUsed;
    try {
      await this.collect();
      this.collections++;
      this.opts.logger.verbose(2, 'a flood of connections ended; ran one full garbage collection', {
        closedConnections: closed,
        heapUsedMB: Math.round(heapBefore / 1048576),
        heapUsedAfterMB: Math.round(process.memoryUsage().heapUsed / 1048576),
        durationMs: Math.round(performance.now() - started),
      });
    } catch (err: unknown) {
      this.opts.logger.warn('could not run a garbage collection after a flood of connections; memory comes back later', {
        error: errorMessage(err),
      });
    } finally {
      this.running = false;
    }
  }
}
