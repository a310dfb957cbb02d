// The HTTP answers of a CONNECT proxy: the exact success line, and complete
// error responses with a one-line reason, chosen from a dial failure's code.

import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { DialFailureReason } from '../protocol/errors.js';

export const CONNECTION_ESTABLISHED = Buffer.from('HTTP/1.1 200 Connection Established\r\n\r\n', 'latin1');

export function statusForDialFailure(code: DialFailureReason): number {
  switch (code) {
    case 'YT_ERR_NO_AGENT':
    case 'YT_ERR_TUNNEL_CLOSED':
    case 'YT_ERR_TOO_MANY_DIALS':
    case 'YT_ERR_AGENT_LOST':
      return 503;
    case 'YT_ERR_DIAL_FAILED':
    case 'YT_ERR_DIAL_DENIED':
    case 'YT_ERR_AGENT_GONE':
    case 'YT_ERR_DIAL_CANCELLED':
      return 502;
    case 'YT_ERR_DIAL_TIMEOUT':
      return 504;
    case 'YT_ERR_BAD_ADDRESS':
      return 400;
    case 'YT_ERR_DIAL_LOOP':
      // 508 Loop Detected (RFC 5842): the request is well formed, but the
      // address it names is this server, and it would come back here forever.
      return 508;
  }
}

/** Longest reason put into a status line. */
const MAX_STATUS_REASON = 300;

/**
 * The reason phrase of a CONNECT error: kube-apiserver shows a proxy's
 * status line to the user (`proxy error ..., code 503: <status line>`) but not
 * its body, so the cause goes there too.
 */
export function statusLineWithReason(status: number, reason: string): string {
  const text = reason.replace(/[^\t\x20-\x7e]+/g, ' ').slice(0, MAX_STATUS_REASON);
  return `${STATUS_CODES[status] ?? 'Error'}: ${text}`;
}

/**
 * A complete response that closes the connection; `reason` becomes the
 * one-line body and, with `reasonInStatusLine`, also the status line's phrase.
 */
export function errorResponse(status: number, reason: string, extraHeaders: Record<string, string> = {}, opts: { reasonInStatusLine?: boolean } = {}): string {
  const body = reason.replace(/[\r\n]+/g, ' ') + '\n';
  const headers = {
    'Content-Type': 'text/plain; charset=utf-8',
    'Content-Length': String(Buffer.byteLength(body)),
    Connection: 'close',
    ...extraHeaders,
  };
  const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
  const phrase = opts.reasonInStatusLine === true ? statusLineWithReason(status, reason) : (STATUS_CODES[status] ?? 'Error');
  return `HTTP/1.1 ${status} ${phrase}\r\n${lines.join('')}\r\n${body}`;
}

/** How long to keep reading (and discarding) after an error answer, so the client gets it rather than a reset. */
const LINGER_MS = 2000;

/**
 * Writes a final answer and closes the socket gracefully: what the client
 * still sends is read and dropped until it closes or LINGER_MS passes.
 */
export function answerAndClose(socket: Socket, response: string): void {
  socket.end(response);
  const timer = setTimeout(() => socket.destroy(), LINGER_MS);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  socket.once('end', () => socket.destroy());
  socket.on('data', () => {});
  socket.resume();
}
