// A logger that keeps records in memory, for tests that check what was logged.

import type { LogFields, Logger, SharedVerbosity } from '../../pkg/log/logger.js';

export interface LogRecord {
  level: 'error' | 'warn' | 'info';
  message: string;
  fields: LogFields;
  /** performance.now() when it was logged, for tests that check when something happened. */
  at: number;
}

export class MemoryLogger implements Logger {
  readonly records: LogRecord[];
  private readonly verbosity: SharedVerbosity;
  constructor(
    verbosity: number | SharedVerbosity = 10,
    private readonly fields: LogFields = {},
    sink: LogRecord[] = [],
  ) {
    this.records = sink;
    this.verbosity = typeof verbosity === 'number' ? { level: verbosity } : verbosity;
  }
  private add(level: LogRecord['level'], message: string, fields?: LogFields): void {
    this.records.push({ level, message, fields: { ...this.fields, ...fields }, at: performance.now() });
  }
  error(message: string, fields?: LogFields): void {
    this.add('error', message, fields);
  }
  warn(message: string, fields?: LogFields): void {
    this.add('warn', message, fields);
  }
  info(message: string, fields?: LogFields): void {
    this.add('info', message, fields);
  }
  verbose(level: number, message: string, fields?: LogFields): void {
    if (level <= this.verbosity.level) this.add('info', message, fields);
  }
  enabled(level: number): boolean {
    return level <= this.verbosity.level;
  }
  getVerbosity(): number {
    return this.verbosity.level;
  }
  setVerbosity(level: number): void {
    this.verbosity.level = level;
  }
  child(fields: LogFields): Logger {
    return new MemoryLogger(this.verbosity, { ...this.fields, ...fields }, this.records);
  }
  /** Records whose message contains `text`. */
  find(text: string): LogRecord[] {
    return this.records.filter((r) => r.message.includes(text));
  }
}
