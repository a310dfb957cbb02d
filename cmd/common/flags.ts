// Flag value parsers for both CLIs. Each throws commander's
// InvalidArgumentError with one line that says what is expected.

import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { splitHostPort } from '../../pkg/net/host-port.js';
import { MAX_RESUME_WINDOW_MS, MIN_RESUME_WINDOW_MS } from '../../pkg/protocol/resume.js';

const UNITS_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A Go-style duration ("10s", "500ms", "1m30s") or a number of seconds; returns milliseconds. */
export function parseDuration(text: string): number {
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text) * 1000;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let matched = 0;
  for (const m of text.matchAll(re)) {
    total += Number(m[1]) * UNITS_MS[m[2]!]!;
    matched += m[0].length;
  }
  if (matched !== text.length || text === '') {
    throw new InvalidArgumentError(`not a duration: use e.g. 10s, 500ms, 1m (got ${JSON.stringify(text)})`);
  }
  return total;
}

export function parsePort(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n > 65535) throw new InvalidArgumentError(`not a port number 0-65535 (got ${JSON.stringify(text)})`);
  return n;
}

/** A comma list of ports 1-65535. */
export function parsePortList(text: string): number[] {
  return parseList(text).map((p) => {
    const n = Number(p);
    if (!/^\d+$/.test(p) || n < 1 || n > 65535) throw new InvalidArgumentError(`${JSON.stringify(p)} is not a port number 1-65535`);
    return n;
  });
}

export function parsePositiveInt(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < 1) throw new InvalidArgumentError(`not a positive integer (got ${JSON.stringify(text)})`);
  return n;
}

export function parseNonNegativeInt(text: string): number {
  if (!/^\d+$/.test(text)) throw new InvalidArgumentError(`not a non-negative integer (got ${JSON.stringify(text)})`);
  return Number(text);
}

const BYTE_UNITS: Record<string, number> = { '': 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3 };

/** A positive number of bytes, plain or with a binary suffix as Kubernetes quantities have it: 268435456, 256Mi, 1Gi. */
export function parseByteSize(text: string): number {
  const m = /^(\d+)(Ki|Mi|Gi)?$/.exec(text);
  const n = m === null ? NaN : Number(m[1]) * BYTE_UNITS[m[2] ?? '']!;
  if (!(n >= 1) || !Number.isSafeInteger(n)) {
    throw new InvalidArgumentError(`not a positive size in bytes: use e.g. 268435456, 512Ki, 256Mi, 1Gi (got ${JSON.stringify(text)})`);
  }
  return n;
}

/** host:port or [IPv6]:port, port 1-65535 (what a dial needs: no default port is guessed). */
export function parseHostPort(text: string): string {
  if (splitHostPort(text) === undefined) {
    throw new InvalidArgumentError(
      `not host:port with a port 1-65535, e.g. 10.0.0.1:10262, [fd00::1]:10262, tunnel.example.com:10262 (got ${JSON.stringify(text)})`,
    );
  }
  return text;
}

/**
 * host:port, or an http(s) URL with a host (--apiserver-addr takes both). A
 * bare IPv6 address and port ("fd00::1:443") passes as before: the manifests
 * build this flag from KUBERNETES_SERVICE_HOST and _PORT.
 */
export function parseHostPortOrURL(text: string): string {
  if (/^https?:\/\//i.test(text) && URL.canParse(text) && new URL(text).hostname !== '') return text;
  if (splitHostPort(text) !== undefined) return text;
  const lastColon = text.lastIndexOf(':');
  if (isIP(text.slice(0, lastColon)) === 6 && splitHostPort(`[${text.slice(0, lastColon)}]${text.slice(lastColon)}`) !== undefined) return text;
  throw new InvalidArgumentError(`not host:port or an https:// URL, e.g. 10.0.0.1:6443 or https://10.0.0.1:6443 (got ${JSON.stringify(text)})`);
}

export function parseIP(text: string): string {
  if (isIP(text) === 0) throw new InvalidArgumentError(`not an IP address (got ${JSON.stringify(text)})`);
  return text;
}

export function parseList(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

export function parseIPList(text: string): string[] {
  const list = parseList(text);
  for (const ip of list) if (isIP(ip) === 0) throw new InvalidArgumentError(`${JSON.stringify(ip)} is not an IP address`);
  return list;
}

/** Go-style booleans: true/false/1/0/t/f. A bare flag (commander passes true) means true. */
export function parseBool(text: string | boolean): boolean {
  if (typeof text === 'boolean') return text;
  const t = text.toLowerCase();
  if (['true', 't', '1'].includes(t)) return true;
  if (['false', 'f', '0'].includes(t)) return false;
  throw new InvalidArgumentError(`not a boolean: use true or false (got ${JSON.stringify(text)})`);
}

export function parseLogFormat(text: string): 'text' | 'json' {
  if (text !== 'text' && text !== 'json') throw new InvalidArgumentError(`use text or json (got ${JSON.stringify(text)})`);
  return text;
}

/** The package version, read from package.json next to dist/ (three folders up from dist/cmd/common/ and from each file of the bundles in dist/bin/: hack/bundle.mjs). */
export function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** How a duration flag is written, for --help. */
export const DURATION_RULE = 'a duration such as 500ms, 10s, 1m30s, 2h; a bare number is seconds';

/**
 * What a duration flag accepts: `min` to `max` (written as durations), and 0
 * only where it means something (`zero` says what). Outside the range a
 * value could not work (a 0 dial timeout fails every dial) or is surely a
 * slip (a timer of years; Node's timers also stop at 24.8 days).
 */
export interface DurationRange {
  min: string;
  max: string;
  zero?: string;
}

/** The words for a range, in --help and errors: "100ms to 10m, or 0 (off)". */
function rangeText(range: DurationRange): string {
  return `${range.min} to ${range.max}${range.zero !== undefined ? `, or 0 (${range.zero})` : ''}`;
}

/** A parser for one duration flag: its value in milliseconds, refused outside `range` with the range said. */
export function durationParser(range: DurationRange): (text: string) => number {
  const min = parseDuration(range.min);
  const max = parseDuration(range.max);
  return (text) => {
    if (text.startsWith('-')) throw new InvalidArgumentError(`cannot be negative: use ${rangeText(range)} (got ${JSON.stringify(text)})`);
    const ms = parseDuration(text);
    if (ms === 0 && range.zero !== undefined) return 0;
    if (ms < min || ms > max) throw new InvalidArgumentError(`out of range: use ${rangeText(range)} (got ${JSON.stringify(text)})`);
    return ms;
  };
}

/** A duration flag: the unit rule and the range in --help after `description`, the default written as a duration ("10s"). */
export function durationOption(flags: string, description: string, defaultText: string, range: DurationRange): Option {
  const parse = durationParser(range);
  return new Option(flags, `${description} (${DURATION_RULE}; ${rangeText(range)})`).argParser(parse).default(parse(defaultText), defaultText);
}

const RESUME_WINDOW_RANGE: DurationRange = { min: `${MIN_RESUME_WINDOW_MS}ms`, max: `${MAX_RESUME_WINDOW_MS / 60_000}m`, zero: 'off' };

/** --resume-window: 0 (off) or a window the resume metadata can carry; anything else is refused, not quietly taken as off. */
export const parseResumeWindow = durationParser(RESUME_WINDOW_RANGE);

/** The one --resume-window flag both binaries take. */
export function resumeWindowOption(): Option {
  return durationOption(
    '--resume-window <duration>',
    'how long a link that drops without a goodbye keeps its connections for the agent to come back (session resume, between our own server and agent; the shorter of both ends is used)',
    '10s',
    RESUME_WINDOW_RANGE,
  );
}

/** The options both binaries take for the process itself (profiling, the start-up rehearsal, the log), after their own. */
export function addProcessOptions(command: Command): Command {
  return command
    .option('--enable-profiling [bool]', 'serve /debug/pprof/profile?seconds=N (CPU) and /debug/pprof/heap on the meta port', parseBool, false)
    .option(
      '--startup-rehearsal [bool]',
      'before reporting ready, rehearse the data path privately over loopback sockets: the first connections after a start are not slowed by V8 compiling it, for 1-4 s more from start to ready',
      parseBool,
      false,
    )
    .option(
      '-v, --v <level>',
      'log verbosity (klog-style): 0 errors and lifecycle, 1 failed dials, 2 one line per tunnelled connection when it ends, 3 connection details, 4 every packet',
      parseNonNegativeInt,
      0,
    )
    .option('--log-format <format>', 'text or json', parseLogFormat, 'text' as const);
}
