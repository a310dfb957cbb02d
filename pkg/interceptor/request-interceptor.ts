// Forwards a request to the kubelet through the tunnel and its answer back:
// - ordinary requests stream both ways; each response chunk is written as it
//   arrives (containerLogs?follow=true), and the tunnel connection is closed as
//   soon as the caller goes away;
// - upgrades (exec, attach, port-forward over SPDY/3.1 or WebSocket) are
//   relayed as raw bytes after the kubelet's 101; any other answer is passed
//   back as it came.
// Failures get a status the caller can act on and a one-line reason: the
// proxier's 502/503/504, 502 for a failed TLS handshake with the kubelet.

import { request, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { errorResponse } from '../frontend/http-answer.js';
import { splice } from '../mux/splice.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { KubeletTLSError, type KubeletConnector, type TunnelTarget } from './kubelet-connector.js';
import { ProxierError } from './proxier-dialer.js';
import { PROXY_DEST_HEADER, PROXY_HOST_HEADER, splitAddress, type RequestContext } from './request-context.js';

/** Headers that describe one hop, not the message (RFC 9110 §7.6.1), plus our routing headers. */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  PROXY_HOST_HEADER,
  PROXY_DEST_HEADER,
]);

/**
 * The raw header list (name, value, name, value, …) without hop-by-hop
 * headers; for an upgrade, Connection and Upgrade stay, as the kubelet needs them.
 */
export function forwardedHeaders(raw: readonly string[], upgrade: boolean): string[] {
  const out: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name) && !(upgrade && (name === 'connection' || name === 'upgrade'))) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

/** Status and one-line reason for a failure before any answer came. */
export function failureFor(err: unknown, ctx: RequestContext): { status: number; reason: string } {
  const node = ctx.proxyHost ?? ctx.dialAddress;
  if (err instanceof ProxierError) return { status: err.status === 0 ? 502 : err.status, reason: err.reason || err.message };
  if (err instanceof KubeletTLSError) return { status: 502, reason: err.message };
  return { status: 502, reason: `connection to the kubelet of node ${node} at ${ctx.dialAddress} failed: ${errorMessage(err)}` };
}

function rawHeaderLines(raw: readonly string[]): string {
  let text = '';
  for (let i = 0; i + 1 < raw.length; i += 2) text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  return text;
}

export class RequestInterceptor {
  constructor(
    private readonly connector: KubeletConnector,
    private readonly log: Logger,
  ) {}

  private target(ctx: RequestContext): TunnelTarget {
    return { dialAddress: ctx.dialAddress, proxyHost: ctx.proxyHost, tls: ctx.tls, userAgent: ctx.userAgent };
  }

  private upstream(ctx: RequestContext, req: IncomingMessage, upgrade: boolean): ReturnType<typeof request> {
    const address = splitAddress(ctx.dialAddress)!;
    const options: RequestOptions & { tunnel: TunnelTarget } = {
      agent: this.connector,
      host: address.host,
      port: address.port,
      method: req.method,
      path: req.url,
      // An array keeps the caller's header names and order (node ≥ 18.16 accepts rawHeaders form).
      headers: forwardedHeaders(req.rawHeaders, upgrade) as unknown as RequestOptions['headers'],
      setHost: false,
      tunnel: this.target(ctx),
    };
    return request(options);
  }

  /** An ordinary request: streamed both ways. */
  handleRequest(ctx: RequestContext, req: IncomingMessage, res: ServerResponse): void {
    const up = this.upstream(ctx, req, false);
    res.sendDate = false; // the kubelet's Date is passed on
    up.on('response', (answer: IncomingMessage) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardedHeaders(answer.rawHeaders, false));
      // Headers go out now: a log stream may send its first line much later.
      res.flushHeaders();
      answer.pipe(res);
      answer.on('error', () => res.destroy());
    });
    up.on('error', (err) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const { status, reason } = failureFor(err, ctx);
      this.log.warn('request to kubelet failed', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, url: ctx.url, status, error: reason });
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
      res.end(reason.replace(/[\r\n]+/g, ' ') + '\n');
    });
    // The caller went away: close the tunnel connection at once (a follow stream ends at the kubelet).
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  }

  /** An upgrade (exec, attach, port-forward): after a 101, raw bytes both ways. */
  handleUpgrade(ctx: RequestContext, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const up = this.upstream(ctx, req, true);
    socket.on('error', () => up.destroy());
    const closeEarly = (): void => {
      up.destroy();
    };
    socket.once('close', closeEarly);
    up.on('upgrade', (answer: IncomingMessage, kubelet: Duplex, kubeletHead: Buffer) => {
      socket.off('close', closeEarly);
      (kubelet as Partial<{ setTimeout(ms: number): void }>).setTimeout?.(0);
      socket.write(`HTTP/1.1 ${answer.statusCode} ${answer.statusMessage}\r\n${rawHeaderLines(answer.rawHeaders)}\r\n`);
      if (kubeletHead.length > 0) socket.write(kubeletHead);
      if (head.length > 0) kubelet.write(head);
      splice(socket, kubelet);
    });
    up.on('response', (answer: IncomingMessage) => {
      // Not upgraded (e.g. 403 for an unsupported protocol): pass the answer on as it came, then close.
      socket.off('close', closeEarly);
      const headers = forwardedHeaders(answer.rawHeaders, false);
      socket.write(`HTTP/1.1 ${answer.statusCode} ${answer.statusMessage}\r\n${rawHeaderLines(headers)}Connection: close\r\n\r\n`);
      answer.pipe(socket);
      answer.on('error', () => socket.destroy());
    });
    up.on('error', (err) => {
      socket.off('close', closeEarly);
      if (socket.destroyed) return;
      const { status, reason } = failureFor(err, ctx);
      this.log.warn('upgrade request to kubelet failed', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, url: ctx.url, status, error: reason });
      socket.end(errorResponse(status, reason));
    });
    up.end();
  }
}
