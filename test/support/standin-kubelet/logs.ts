// GET /containerLogs/{ns}/{pod}/{container}: three made-up lines, with the
// kubelet's query options. follow=true answers chunked and then writes
// "follow N" every interval, each line flushed as its own chunk, until the
// caller goes, limitBytes is reached, or the server closes.

import type { ServerResponse } from 'node:http';
import { textResponse, type SimpleResponse } from './http-response.js';

export interface LogQuery {
  follow: boolean;
  timestamps: boolean;
  tailLines: number | null;
  sinceSeconds: number | null;
  limitBytes: number | null;
}

export interface FollowStreamRecord {
  id: number;
  /** The request target, e.g. /containerLogs/default/p1/c1?follow=true. */
  target: string;
  /** Which TLS connection (StandinKubelet.requests[].connection) carried it. */
  connection: number;
  /** performance.now() when the response started. */
  startedAt: number;
  /** performance.now() when each "follow N" line was written (the first 10 000). */
  lineTimes: number[];
  /** "follow N" lines written. */
  linesWritten: number;
  /** performance.now() when the stream ended and its timer stopped; null while it runs. */
  endedAt: number | null;
  endReason: 'client-gone' | 'limit' | 'server-closed' | null;
}

export interface FollowContext {
  intervalMs: number;
  maxLines: number;
  /** Called once when the stream ends (timer already cleared). */
  onEnd(record: FollowStreamRecord): void;
}

const BASE_LINES = ['line 1', 'line 2', 'line 3'];
const LINE_TIMES_KEPT = 10_000;
const EPOCH_MS = Date.UTC(2024, 0, 1);

/** Go's strconv.ParseBool. */
function parseBool(v: string): boolean | null {
  if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return true;
  if (['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) return false;
  return null;
}

function parseInt64(v: string): number | null {
  return /^[+-]?\d{1,15}$/.test(v) ? Number(v) : null;
}

const BAD_QUERY = textResponse(400, '{"message": "Unable to decode query."}');
const INVALID = textResponse(422, '{"message": "Invalid request."}');

/** The options, or the 400/422 answer a kubelet gives for them. */
export function parseLogQuery(q: URLSearchParams): LogQuery | SimpleResponse {
  const bool = (name: string): boolean | null => {
    const v = q.get(name);
    return v === null ? false : parseBool(v);
  };
  const int = (name: string): number | null | undefined => {
    const v = q.get(name);
    if (v === null) return null;
    return parseInt64(v) ?? undefined;
  };
  const follow = bool('follow');
  const timestamps = bool('timestamps');
  const previous = bool('previous');
  const tailLines = int('tailLines');
  const sinceSeconds = int('sinceSeconds');
  const limitBytes = int('limitBytes');
  if (follow === null || timestamps === null || previous === null) return BAD_QUERY;
  if (tailLines === undefined || sinceSeconds === undefined || limitBytes === undefined) return BAD_QUERY;
  const sinceTime = q.get('sinceTime');
  if (sinceTime !== null && Number.isNaN(Date.parse(sinceTime))) return BAD_QUERY;
  if ((tailLines !== null && tailLines < 0) || (sinceSeconds !== null && sinceSeconds < 1) || (limitBytes !== null && limitBytes < 1)) return INVALID;
  if (sinceSeconds !== null && sinceTime !== null) return INVALID;
  return { follow, timestamps, tailLines, sinceSeconds, limitBytes };
}

/** Made-up timestamps: the n-th line written gets 2024-01-01T00:00:00Z plus n seconds. */
function formatLine(text: string, n: number, timestamps: boolean): string {
  if (!timestamps) return `${text}\n`;
  const iso = new Date(EPOCH_MS + n * 1000).toISOString().replace(/\.(\d{3})Z$/, '.$1000000Z');
  return `${iso} ${text}\n`;
}

function tail(q: LogQuery): string[] {
  return q.tailLines === null ? BASE_LINES : BASE_LINES.slice(Math.max(0, BASE_LINES.length - q.tailLines));
}

/** The body of a non-follow request (sinceSeconds is accepted and ignored: every line is recent). */
export function logBody(q: LogQuery): string {
  const body = tail(q)
    .map((l, i) => formatLine(l, i, q.timestamps))
    .join('');
  return q.limitBytes === null ? body : Buffer.from(body).subarray(0, q.limitBytes).toString('latin1');
}

/**
 * Streams a follow=true answer on `res`. Returns a function that ends the
 * stream from the server side.
 */
export function serveFollow(res: ServerResponse, q: LogQuery, record: FollowStreamRecord, ctx: FollowContext): () => void {
  let budget = q.limitBytes ?? Infinity;
  let n = 0; // lines written, for timestamps
  let timer: NodeJS.Timeout | null = null;

  const stop = (reason: NonNullable<FollowStreamRecord['endReason']>): void => {
    if (timer === null) return;
    clearInterval(timer);
    timer = null;
    record.endedAt = performance.now();
    record.endReason = reason;
    ctx.onEnd(record);
  };
  // Returns false once the byte budget is spent (the response is then ended).
  const writeLine = (text: string): boolean => {
    const line = Buffer.from(formatLine(text, n++, q.timestamps));
    const part = line.subarray(0, Math.min(line.length, budget));
    budget -= part.length;
    res.write(part);
    if (budget > 0) return true;
    stop('limit');
    res.end();
    return false;
  };

  res.socket?.setNoDelay(true);
  res.writeHead(200, ['Content-Type', 'text/plain; charset=utf-8']);
  res.flushHeaders();
  res.once('close', () => stop(res.writableFinished ? 'limit' : 'client-gone'));
  timer = setInterval(() => {
    // A caller that does not read gets no new lines until it catches up.
    if (res.writableNeedDrain) return;
    record.linesWritten++;
    if (record.lineTimes.length < LINE_TIMES_KEPT) record.lineTimes.push(performance.now());
    if (!writeLine(`follow ${record.linesWritten}`)) return;
    if (record.linesWritten >= ctx.maxLines) {
      stop('limit');
      res.end();
    }
  }, ctx.intervalMs);
  timer.unref();
  for (const l of tail(q)) {
    if (!writeLine(l)) break;
  }
  return () => {
    if (timer === null) return;
    stop('server-closed');
    res.destroy();
  };
}
