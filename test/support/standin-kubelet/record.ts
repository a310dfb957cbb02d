// What the stand-in saw, kept for tests to assert on, and a helper to wait
// until enough of it has happened.

import type { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';
import { StandinTimeoutError } from './errors.js';

export interface ClientSubject {
  commonName: string;
  organizations: string[];
}

export interface RecordedRequest {
  method: string;
  target: string;
  httpVersion: string;
  /** Raw order and spelling, one entry per header line. */
  headers: Array<[string, string]>;
  /** Subject of the verified client certificate. */
  clientSubject: ClientSubject;
  /** SNI the client sent, or false for none. */
  tlsServername: string | false;
  /** ALPN protocol agreed, or false. */
  alpnProtocol: string | false;
  /** Sequence number of the TLS connection it came on (1, 2, ...): equal numbers mean one kept-alive connection. */
  connection: number;
  /** Went to the upgrade handler (Connection: Upgrade with an Upgrade header). */
  upgrade: boolean;
  /** performance.now() when the head was parsed. */
  at: number;
}

export interface TLSClientErrorRecord {
  at: number;
  code: string | undefined;
  message: string;
}

function asList(v: unknown): string[] {
  if (Array.isArray(v)) return v.filter((x): x is string => typeof x === 'string');
  return typeof v === 'string' ? [v] : [];
}

export function clientSubject(socket: TLSSocket): ClientSubject {
  const cert = socket.getPeerCertificate();
  // Node gives a string per attribute, or an array when one repeats (several O= values).
  const subject = (cert as { subject?: Record<string, unknown> }).subject ?? {};
  return { commonName: asList(subject['CN'])[0] ?? '', organizations: asList(subject['O']) };
}

export function recordRequest(req: IncomingMessage, connection: number, upgrade: boolean): RecordedRequest {
  const socket = req.socket as TLSSocket;
  const headers: Array<[string, string]> = [];
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) headers.push([req.rawHeaders[i]!, req.rawHeaders[i + 1]!]);
  const sni = socket.servername;
  return {
    method: req.method ?? '',
    target: req.url ?? '',
    httpVersion: req.httpVersion,
    headers,
    clientSubject: clientSubject(socket),
    tlsServername: typeof sni === 'string' && sni !== '' ? sni : false,
    alpnProtocol: typeof socket.alpnProtocol === 'string' ? socket.alpnProtocol : false,
    connection,
    upgrade,
    at: performance.now(),
  };
}

/**
 * Resolves with `check()`'s value once it is defined, re-checking on each
 * `event`; rejects after `timeoutMs` or when `abortEvent` fires first.
 */
export function waitUntil<T>(
  emitter: EventEmitter,
  event: string,
  check: () => T | undefined,
  timeoutMs: number,
  what: string,
  abortEvent = 'close',
): Promise<T> {
  const now = check();
  if (now !== undefined) return Promise.resolve(now);
  return new Promise((resolve, reject) => {
    const cleanup = (): void => {
      clearTimeout(timer);
      emitter.removeListener(event, onEvent);
      emitter.removeListener(abortEvent, onAbort);
    };
    const onEvent = (): void => {
      const v = check();
      if (v === undefined) return;
      cleanup();
      resolve(v);
    };
    const onAbort = (): void => {
      cleanup();
      reject(new StandinTimeoutError(`gave up waiting for ${what}: the stand-in kubelet closed`));
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new StandinTimeoutError(`gave up waiting for ${what} after ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    emitter.on(event, onEvent);
    emitter.once(abortEvent, onAbort);
  });
}
