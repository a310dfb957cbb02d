// What an API call's failure was, in the terms controllers decide by: the
// HTTP status of an ApiException, a watch's Status object, or no status at
// all (the API server could not be reached); and the WatchError a watch ends with.

import { TunnelError } from '../protocol/errors.js';

export const HTTP_NOT_FOUND = 404;
export const HTTP_CONFLICT = 409;
export const HTTP_GONE = 410;

/** The HTTP status an API call failed with, or undefined when it never got an answer. */
export function apiStatusCode(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; statusCode?: unknown };
  if (typeof e.code === 'number') return e.code;
  if (typeof e.statusCode === 'number') return e.statusCode;
  return undefined;
}

export function isNotFound(err: unknown): boolean {
  return apiStatusCode(err) === HTTP_NOT_FOUND;
}

export function isConflict(err: unknown): boolean {
  return apiStatusCode(err) === HTTP_CONFLICT;
}

/** The resourceVersion asked for is older than the API server keeps: list again. */
export function isGone(err: unknown): boolean {
  return apiStatusCode(err) === HTTP_GONE;
}

/** A short description of an API failure for a log line: status and the server's message. */
export function apiErrorMessage(err: unknown): string {
  if (typeof err !== 'object' || err === null) return String(err);
  const e = err as { code?: unknown; body?: unknown; message?: unknown };
  let body = e.body;
  if (typeof body === 'string') {
    try {
      body = JSON.parse(body) as unknown;
    } catch {
      // Not JSON: the text itself is the message.
    }
  }
  const serverMessage =
    typeof body === 'object' && body !== null && typeof (body as { message?: unknown }).message === 'string'
      ? (body as { message: string }).message
      : typeof body === 'string' && body !== ''
        ? body
        : undefined;
  const status = apiStatusCode(err);
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- an object thrown without a message: its own toString(), if any, is all it says
  const base = serverMessage ?? (typeof e.message === 'string' ? e.message : String(err));
  return status === undefined ? base : `HTTP ${status}: ${base}`;
}

export type WatchErrorCode =
  /** The resourceVersion watched from is older than the API server keeps (410 Gone): list again. */
  | 'YT_ERR_WATCH_EXPIRED'
  /** The watch ended with another error status. */
  | 'YT_ERR_WATCH_FAILED';

/** A Kubernetes watch that ended with an ERROR event; `statusCode` is the Status object's code. */
export class WatchError extends TunnelError {
  override readonly name = 'WatchError';
  constructor(
    readonly code: WatchErrorCode,
    readonly statusCode: number | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
