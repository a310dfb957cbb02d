// Parses an HTTP/1.x request head (request line + headers) from the first
// bytes of a connection. Strict where ambiguity could hurt a proxy: no header
// folding, token method and header names, HTTP/1.0 or 1.1 only, no control
// characters in the request line or a header value.

import { escapeControls } from '../log/logger.js';

export interface RequestHead {
  method: string;
  target: string;
  version: string;
  /** Header names lower-cased; values trimmed; repeats kept in order. */
  headers: Map<string, string[]>;
}

export type HeadParseResult =
  { kind: 'incomplete' } | { kind: 'complete'; head: RequestHead; length: number } | { kind: 'error'; status: 400; message: string };

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const VERSION = /^HTTP\/1\.[01]$/;

const LF = 0x0a;
const CR = 0x0d;

/** Index just past the first blank line (CRLF or bare LF endings) within `limit`, or -1. */
function headEnd(buf: Buffer, limit: number): number {
  // The first line feed that starts an empty line ends the head; a later one cannot end it sooner.
  for (let i = buf.indexOf(LF); i >= 0 && i < limit; i = buf.indexOf(LF, i + 1)) {
    let end = -1;
    if (buf[i + 1] === LF) end = i + 2;
    else if (buf[i + 1] === CR && buf[i + 2] === LF) end = i + 3;
    if (end >= 0) return end <= limit ? end : -1;
  }
  return -1;
}

// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\x00-\x1f\x7f]/;

/** The first control character (as 0x00) in `text`, or undefined. */
function controlIn(text: string): string | undefined {
  const m = CONTROL.exec(text);
  return m === null ? undefined : `0x${m[0].charCodeAt(0).toString(16).padStart(2, '0')}`;
}

/** A caller's text for a 400's reason: quoted, cut at 200 characters, control characters escaped. */
function quoted(text: string): string {
  return `"${escapeControls(text.slice(0, 200).replace(/["\\]/g, '\\$&'))}"`;
}

function requestLineControl(line: string): string | undefined {
  const found = controlIn(line);
  return found === undefined ? undefined : `control character ${found} in the request line ${quoted(line)}`;
}

/** RFC 9110 5.5: a field value holds no control characters but HTAB. */
function headerValueControl(name: string, value: string): string | undefined {
  const found = controlIn(value.replaceAll('\t', ' '));
  return found === undefined ? undefined : `control character ${found} in the value of header ${name}: ${quoted(value)}`;
}

/**
 * The reason parseRequestHead would give for the first control character in
 * a request head, complete or not (for a head Node's own parser refused,
 * whose reason does not say where); undefined when it holds none.
 */
export function controlCharacterReason(raw: Buffer): string | undefined {
  const lines = raw.toString('latin1').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.endsWith('\r') ? lines[i]!.slice(0, -1) : lines[i]!;
    if (i === 0) {
      const inLine = requestLineControl(line);
      if (inLine !== undefined) return inLine;
      continue;
    }
    if (line === '') return undefined;
    const colon = line.indexOf(':');
    const inValue = colon > 0 ? headerValueControl(line.slice(0, colon), line.slice(colon + 1).trim()) : undefined;
    if (inValue !== undefined) return inValue;
  }
  return undefined;
}

export function parseRequestHead(buf: Buffer, maxHeadBytes: number): HeadParseResult {
  const end = headEnd(buf, maxHeadBytes);
  if (end < 0) {
    if (buf.length >= maxHeadBytes) {
      return { kind: 'error', status: 400, message: `request head is larger than ${maxHeadBytes} bytes` };
    }
    return { kind: 'incomplete' };
  }
  const text = buf.toString('latin1', 0, end);
  const lines = text.split('\n');
  // The head ends with an empty line, which split() leaves as two empty strings.
  lines.length -= 2;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (line.charCodeAt(line.length - 1) === CR) lines[i] = line.slice(0, -1);
  }
  const requestLine = lines.shift() ?? '';
  // A NUL in a CONNECT host would otherwise reach the dial (and every log line that names it).
  const inLine = requestLineControl(requestLine);
  if (inLine !== undefined) return { kind: 'error', status: 400, message: inLine };
  const parts = requestLine.split(' ');
  if (parts.length !== 3 || !TOKEN.test(parts[0]!) || parts[1] === '' || !VERSION.test(parts[2]!)) {
    return { kind: 'error', status: 400, message: `malformed request line ${JSON.stringify(requestLine.slice(0, 200))}` };
  }
  const headers = new Map<string, string[]>();
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = colon > 0 ? line.slice(0, colon) : '';
    if (!TOKEN.test(name)) {
      return { kind: 'error', status: 400, message: `malformed header line ${JSON.stringify(line.slice(0, 200))}` };
    }
    const value = line.slice(colon + 1).trim();
    const inValue = headerValueControl(name, value);
    if (inValue !== undefined) return { kind: 'error', status: 400, message: inValue };
    const key = name.toLowerCase();
    const list = headers.get(key);
    if (list === undefined) headers.set(key, [value]);
    else list.push(value);
  }
  return { kind: 'complete', head: { method: parts[0]!, target: parts[1]!, version: parts[2]!, headers }, length: end };
}

/** The single value of a header, or undefined if absent or empty. */
export function headerValue(head: RequestHead, name: string): string | undefined {
  const v = head.headers.get(name)?.[0];
  return v === undefined || v === '' ? undefined : v;
}
