// Repeated log lines of one kind, kept to a few, as Kubernetes components do
// under floods: of each kind (its message) the first `burst` lines in an
// interval are written; the rest are only counted, and when the interval ends
// one summary line says how many were left out. Metrics elsewhere still count
// every event. Kinds are the messages, which are constants in our code, so the
// table stays small.

import type { LogFields, Logger } from './logger.js';

/** Lines of one kind written per interval before the rest are left out. */
export const DEFAULT_LOG_BURST = 5;
export const DEFAULT_LOG_INTERVAL_MS = 10_000;

export interface LogLimiterOptions {
  burst?: number;
  intervalMs?: number;
}

type Level = 'error' | 'warn' | 'info';

interface Kind {
  level: Level;
  started: number;
  written: number;
  leftOut: number;
  fields: LogFields | undefined;
  timer?: NodeJS.Timeout;
}

export class LogLimiter {
  private readonly burst: number;
  private readonly intervalMs: number;
  private readonly kinds = new Map<string, Kind>();

  constructor(
    private readonly log: Logger,
    opts: LogLimiterOptions = {},
  ) {
    this.burst = opts.burst ?? DEFAULT_LOG_BURST;
    this.intervalMs = opts.intervalMs ?? DEFAULT_LOG_INTERVAL_MS;
  }

  error(message: string, fields?: LogFields): void {
    this.write('error', message, fields);
  }

  warn(message: string, fields?: LogFields): void {
    this.write('warn', message, fields);
  }

  /** As Logger.verbose: nothing at all (not even counting) when the verbosity is below `level`. */
  verbose(level: number, message: string, fields?: LogFields): void {
    if (this.log.enabled(level)) this.write('info', message, fields);
  }

  private write(level: Level, message: string, fields: LogFields | undefined): void {
    const now = Date.now();
    let kind = this.kinds.get(message);
    if (kind !== undefined && now - kind.started >= this.intervalMs && kind.timer === undefined) {
      // A quiet interval ended without anything left out: start afresh.
      this.kinds.delete(message);
      kind = undefined;
    }
    if (kind === undefined) {
      kind = { level, started: now, written: 0, leftOut: 0, fields: undefined };
      this.kinds.set(message, kind);
    }
    if (kind.written < this.burst) {
      kind.written++;
      this.emit(level, message, fields);
      return;
    }
    kind.leftOut++;
    kind.fields = fields;
    if (kind.timer === undefined) {
      kind.timer = setTimeout(() => this.summarize(message), Math.max(0, kind.started + this.intervalMs - now));
      kind.timer.unref();
    }
  }

  private emit(level: Level, message: string, fields: LogFields | undefined): void {
    if (level === 'error') this.log.error(message, fields);
    else if (level === 'warn') this.log.warn(message, fields);
    else this.log.info(message, fields);
  }

  /** Writes the summary of `message`'s interval, with the fields of the last line left out. */
  private summarize(message: string): void {
    const kind = this.kinds.get(message);
    if (kind === undefined) return;
    clearTimeout(kind.timer);
    this.kinds.delete(message);
    if (kind.leftOut === 0) return;
    const seconds = Math.round(this.intervalMs / 100) / 10;
    this.emit(kind.level, `${message} (${kind.leftOut} more like this in ${seconds} s not logged)`, {
      ...kind.fields,
      leftOut: kind.leftOut,
    });
  }

  /** Writes every pending summary now and stops the timers (on close). */
  flush(): void {
    for (const message of [...this.kinds.keys()]) this.summarize(message);
  }
}
