// Small fixed responses, sent either through node:http or raw on a socket
// that an upgrade request left in our hands.

import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

export interface SimpleResponse {
  status: number;
  /** In the order sent; Content-Length and Date are added. */
  headers: Array<[string, string]>;
  body: string;
}

export function textResponse(status: number, text: string, headers: Array<[string, string]> = []): SimpleResponse {
  return { status, headers: [['Content-Type', 'text/plain; charset=utf-8'], ...headers], body: text };
}

export function sendResponse(res: ServerResponse, r: SimpleResponse): void {
  const body = Buffer.from(r.body);
  const headers: string[] = [];
  for (const [k, v] of r.headers) headers.push(k, v);
  headers.push('Content-Length', String(body.length));
  res.writeHead(r.status, headers);
  res.end(body);
}

/** Writes `r` as a complete HTTP/1.1 response and ends the socket (Connection: close). */
export function writeRawResponse(socket: Duplex, r: SimpleResponse): void {
  const body = Buffer.from(r.body);
  const lines = [`HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? 'Unknown'}`];
  for (const [k, v] of r.headers) lines.push(`${k}: ${v}`);
  lines.push(`Date: ${new Date().toUTCString()}`, `Content-Length: ${body.length}`, 'Connection: close', '', '');
  socket.end(Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), body]));
}

/**
 * A status line, no headers, optional text, then close: how
 * golang.org/x/net/websocket refuses a handshake.
 */
export function writeBareStatus(socket: Duplex, status: number, text = ''): void {
  socket.end(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n\r\n${text}`, 'latin1');
}

/** The head of a 101 answer with the given headers (Date added last, as Go does before Content-Length). */
export function switchingProtocolsHead(headers: Array<[string, string]>): string {
  const lines = ['HTTP/1.1 101 Switching Protocols'];
  for (const [k, v] of headers) lines.push(`${k}: ${v}`);
  lines.push('', '');
  return lines.join('\r\n');
}
