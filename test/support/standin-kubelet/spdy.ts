import { once } from 'node:events';
import { PatternVerifier, writePattern } from './bytes.js';
// The client side of SPDY as kubectl speaks it to a kubelet (or through the
// tunnel): upgrade an HTTP/1.1 connection, then open port-forward stream
// pairs or exec streams on the session.

import type { Duplex } from 'node:stream';
import { UpgradeRefusedError } from './errors.js';
import { headerValue, readResponseHead, requestHead, type ResponseHead } from './raw-http.js';
import { SpdySession, type SpdySessionOptions } from './spdy-session.js';
import type { SpdyStream } from './spdy-stream.js';

export { SpdySession, type SpdySessionOptions } from './spdy-session.js';
export { SpdyStream } from './spdy-stream.js';
export { GOAWAY_STATUS, RST_STATUS } from './spdy-frames.js';
export type { SpdyHeaders } from './spdy-headers.js';

export interface SpdyUpgradeRequest {
  /** A connected socket (usually TLS) to the kubelet or to whatever relays to it. */
  socket: Duplex;
  /** Request target, e.g. /portForward/default/p1. */
  target: string;
  /** X-Stream-Protocol-Version values, one header line each, in preference order. */
  protocols: readonly string[];
  /** Host header; default "kubelet". */
  host?: string;
  /** Extra headers, sent after Host. */
  headers?: Array<[string, string]>;
  /** Default POST, as kubectl sends it. */
  method?: string;
  timeoutMs?: number;
  session?: Omit<SpdySessionOptions, 'role'>;
}

export interface SpdyUpgrade {
  session: SpdySession;
  head: ResponseHead;
  /** The X-Stream-Protocol-Version the server chose. */
  protocol: string;
}

/** Sends the upgrade request; resolves with a client session on 101, rejects with UpgradeRefusedError otherwise. */
export async function upgradeToSpdy(req: SpdyUpgradeRequest): Promise<SpdyUpgrade> {
  const headers: Array<[string, string]> = [
    ['Host', req.host ?? 'kubelet'],
    ...(req.headers ?? []),
    ['Content-Length', '0'],
    ['Connection', 'Upgrade'],
    ['Upgrade', 'SPDY/3.1'],
    ...req.protocols.map((p): [string, string] => ['X-Stream-Protocol-Version', p]),
  ];
  req.socket.write(requestHead(req.method ?? 'POST', req.target, headers));
  const { head, rest } = await readResponseHead(req.socket, req.timeoutMs ?? 5000);
  if (head.status !== 101) throw new UpgradeRefusedError(req.target, head.status, head.reason);
  const session = new SpdySession(req.socket, { ...req.session, role: 'client' });
  session.receive(rest);
  req.socket.resume();
  return { session, head, protocol: headerValue(head, 'x-stream-protocol-version') ?? '' };
}

export interface PortForwardStreams {
  requestId: string;
  /** The kubelet writes a failure text here, then ends it. */
  error: SpdyStream;
  /** The forwarded bytes, both ways. */
  data: SpdyStream;
}

/**
 * Opens one forwarded connection the way kubectl does: the error stream
 * (whose write side is closed at once), then, after its reply, the data stream.
 */
export async function openPortForward(session: SpdySession, port: number, requestId: string | number): Promise<PortForwardStreams> {
  const common = { port: String(port), requestid: String(requestId) };
  const error = await session.openStream({ streamtype: 'error', ...common });
  error.end();
  const data = await session.openStream({ streamtype: 'data', ...common });
  return { requestId: String(requestId), error, data };
}

/** Everything a stream delivers until its end (e.g. the error stream's text). */
export async function readAll(stream: SpdyStream, maxBytes = 1024 * 1024): Promise<Buffer> {
  const parts: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream) {
    const b = chunk as Buffer;
    total += b.length;
    if (total > maxBytes) throw new Error(`SPDY stream ${stream.id} sent more than ${maxBytes} bytes`);
    parts.push(b);
  }
  return Buffer.concat(parts);
}

/**
 * Forwards `total` pattern bytes over a new port-forward stream pair (to an
 * echo target) and resolves with how many came back verified, and the error
 * stream's text.
 */
export async function forwardPatternEcho(session: SpdySession, port: number, requestId: number, total: number): Promise<{ echoed: number; errorText: string }> {
  const { error, data } = await openPortForward(session, port, requestId);
  const errorText = readAll(error);
  const verifier = new PatternVerifier();
  data.on('data', (c: Buffer) => verifier.update(c));
  const ended = once(data, 'end');
  writePattern(data, total);
  await ended;
  return { echoed: verifier.received, errorText: (await errorText).toString() };
}
