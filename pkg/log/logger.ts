// Structured logging on winston with klog-style verbosity: 0 errors and
// lifecycle, 1 failed dials, 2 one line per tunnelled connection when it ends,
// 3 connection details, 4 every packet (docs/operating.md, "Logs"). Fields are one
// key per idea (agentID, dialID, connectID, dialAddress); never payloads or keys.

import { Writable } from 'node:stream';
import winston from 'winston';

export type LogFields = Record<string, unknown>;
export type LogFormat = 'text' | 'json';

export interface Logger {
  error(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  /** Always shown (verbosity 0). */
  info(message: string, fields?: LogFields): void;
  /** Shown when the verbosity is at least `level`. */
  verbose(level: number, message: string, fields?: LogFields): void;
  /** Whether `verbose(level, ...)` would print: check it before building fields on hot paths. */
  enabled(level: number): boolean;
  /** A logger that adds `fields` to every line. */
  child(fields: LogFields): Logger;
  /** The verbosity now: one level shared by this logger, the one it came from and every child. */
  getVerbosity(): number;
  /** Sets the verbosity for this logger, the one it came from and every child at once (PUT /debug/flags/v). */
  setVerbosity(level: number): void;
}

/**
 * The one changeable level of a logger and all its children: an object they
 * share, so `enabled()` stays a plain number read on the hot paths.
 */
export interface SharedVerbosity {
  level: number;
}

export interface LoggerOptions {
  /** klog -v; default 0. */
  verbosity?: number;
  format?: LogFormat;
  /** Where lines go; default stderr. */
  stream?: NodeJS.WritableStream;
  /** Added to every line, e.g. `{ component: 'server' }`. */
  fields?: LogFields;
}

// What a terminal or a line-based reader would act on, escaped in every line so
// no caller-supplied value can start a line or colour the screen: C0 controls
// (ESC, CR, LF among them), DEL, C1 controls (0x9b opens a CSI too), the Unicode
// line and paragraph separators, and the bidirectional overrides.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
/** CONTROL without the global flag, whose `test` keeps no state between calls. */
const HAS_CONTROL = new RegExp(CONTROL.source);

/** `\n`, `\r`, `\t`, else `\x1b` (or `\u2028` above 0xff). */
function escapeControl(ch: string): string {
  if (ch === '\n') return '\\n';
  if (ch === '\r') return '\\r';
  if (ch === '\t') return '\\t';
  const code = ch.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`;
}

/** `text` with its control characters escaped, for the text format. */
export function escapeControls(text: string): string {
  return text.replace(CONTROL, escapeControl);
}

/** A string as one field value: bare when that is unambiguous, else quoted with `"` and `\` escaped. */
function renderString(v: string): string {
  if (v !== '' && !/[\s"=\\]/.test(v) && !HAS_CONTROL.test(v)) return v;
  return `"${escapeControls(v.replace(/["\\]/g, '\\$&'))}"`;
}

function renderValue(v: unknown): string {
  if (typeof v === 'string') return renderString(v);
  if (typeof v === 'bigint') return v.toString();
  if (v instanceof Error) return renderString(v.message);
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined for a function or a symbol, whatever lib.d.ts says
  return jsonForText(JSON.stringify(v) ?? String(v));
}

/**
 * JSON text in the text format's escapes: JSON writes C0 controls as \u001b
 * (made \x1b here; each `\\` pair is taken whole, so an escaped backslash
 * stays one) and leaves DEL, C1 and the separators raw (escaped here).
 */
function jsonForText(json: string): string {
  return escapeControls(json.replace(/\\(?:u00([01][0-9a-f])|[^])/g, (esc, hex: string | undefined) => (hex === undefined ? esc : `\\x${hex}`)));
}

const LEVEL_LETTER: Record<string, string> = { error: 'E', warn: 'W', info: 'I' };

function pad(n: number, w = 2): string {
  return String(n).padStart(w, '0');
}

// klog-like: "I1122 19:24:00.123456 message key=value ..."
const textFormat = winston.format.printf((info) => {
  const d = new Date();
  const stamp = `${pad(d.getMonth() + 1)}${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  const { level, message, ...rest } = info;
  const fields = Object.entries(rest)
    .filter(([k, v]) => typeof k === 'string' && v !== undefined)
    .map(([k, v]) => `${escapeControls(k)}=${renderValue(v)}`)
    .join(' ');
  return `${LEVEL_LETTER[level] ?? 'I'}${stamp} ${escapeControls(String(message))}${fields ? ' ' + fields : ''}`;
});

const jsonFormat = winston.format.combine(
  winston.format.timestamp(),
  winston.format.printf((info) =>
    // JSON.stringify escapes C0 controls; the rest of CONTROL can only stand inside strings, where \uXXXX means the same.
    JSON.stringify(info, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v instanceof Error ? v.message : v)).replace(
      CONTROL,
      (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
    ),
  ),
);

class WinstonLogger implements Logger {
  constructor(
    private readonly w: winston.Logger,
    private readonly verbosity: SharedVerbosity,
    private readonly fields: LogFields,
  ) {}

  error(message: string, fields?: LogFields): void {
    this.w.error(message, { ...this.fields, ...fields });
  }
  warn(message: string, fields?: LogFields): void {
    this.w.warn(message, { ...this.fields, ...fields });
  }
  info(message: string, fields?: LogFields): void {
    this.w.info(message, { ...this.fields, ...fields });
  }
  verbose(level: number, message: string, fields?: LogFields): void {
    if (level <= this.verbosity.level) this.w.info(message, { ...this.fields, ...fields });
  }
  enabled(level: number): boolean {
    return level <= this.verbosity.level;
  }
  child(fields: LogFields): Logger {
    return new WinstonLogger(this.w, this.verbosity, { ...this.fields, ...fields });
  }
  getVerbosity(): number {
    return this.verbosity.level;
  }
  setVerbosity(level: number): void {
    this.verbosity.level = level;
  }
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const w = winston.createLogger({
    level: 'info',
    format: opts.format === 'json' ? jsonFormat : textFormat,
    transports: [new winston.transports.Stream({ stream: opts.stream ?? process.stderr })],
  });
  return new WinstonLogger(w, { level: opts.verbosity ?? 0 }, opts.fields ?? {});
}

/** A logger that drops everything. */
export function silentLogger(): Logger {
  return createLogger({ stream: new Writable({ write: (_c, _e, cb) => cb() }), verbosity: -1 });
}
