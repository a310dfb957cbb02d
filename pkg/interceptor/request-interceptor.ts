// Forwards a request to the kubelet through the tunnel and its answer back:
// - ordinary requests stream both ways; each response chunk is written as it
//   arrives (containerLogs?follow=true), and the tunnel connection is closed as
//   soon as the caller goes away;
// - upgrades (exec, attach, port-forward over SPDY/3.1 or WebSocket) are
//   relayed as raw bytes after the kubelet's 101; any other answer is passed
//   back as it came.
// Failures before an answer get a status the caller can act on and a
// one-line reason, as the CONNECT proxier gives them (503 no agent, 502 dial
// refused, 504 dial timeout), 502 for a failed TLS handshake with the kubelet.
// A failure after the answer began reaches the caller as one: the response is
// cut without its last chunk, an upgraded stream is closed abortively.
// Every forwarded request carries our Via (loop-mark.ts), and requests to one
// destination awaiting their answer head are bounded: each hop of a request
// that loops back into a tunnel server waits for the next one
// (frontend/loop-guard.ts).

import { request, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { dialFailureReason, type NodeNameOf } from '../frontend/dial-reason.js';
import { errorResponse, statusForDialFailure } from '../frontend/http-answer.js';
import type { LoopGuard } from '../frontend/loop-guard.js';
import { LogLimiter } from '../log/log-limiter.js';
import { abortStream } from '../mux/abort.js';
import { splice } from '../mux/splice.js';
import type { Logger } from '../log/logger.js';
import { DialError, errorMessage } from '../protocol/errors.js';
import { KubeletTLSError } from './errors.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import { type KubeletConnector, type TunnelTarget } from './kubelet-connector.js';
import { withLoopMark } from './loop-mark.js';
import { readResponseHead, type RawResponseHead } from './response-head.js';
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

/** The raw header list with its Host replaced by `host`, when given. */
function withHost(headers: string[], host: string | undefined): string[] {
  if (host === undefined) return headers;
  const out = ['Host', host];
  for (let i = 0; i + 1 < headers.length; i += 2) if (headers[i]!.toLowerCase() !== 'host') out.push(headers[i]!, headers[i + 1]!);
  return out;
}

/**
 * Status and one-line reason for a failure before any answer came; a failed
 * dial's reason names the node of its address (`nodeNameOf`) when no agent took it.
 */
export function failureFor(err: unknown, ctx: RequestContext, nodeNameOf?: NodeNameOf): { status: number; reason: string } {
  const node = ctx.proxyHost ?? ctx.dialAddress;
  if (err instanceof DialError) {
    return { status: statusForDialFailure(err.code), reason: dialFailureReason(err, removePortFromHost(node), nodeNameOf) };
  }
  if (err instanceof KubeletTLSError) return { status: 502, reason: err.message };
  return { status: 502, reason: `connection to the kubelet of node ${node} at ${ctx.dialAddress} failed: ${errorMessage(err)}` };
}

/**
 * The kubelet's answer was cut: the caller's response stops where it is, with
 * no terminating chunk, on a connection closed abortively (reset, on the plain
 * port), so that it cannot be taken for a whole answer.
 */
function abortResponse(res: ServerResponse, err: Error): void {
  const socket = res.socket;
  if (socket !== null) abortStream(socket, err);
  res.destroy();
}

/** What an upgrading caller may send before the kubelet's connection is ready, kept for it. */
const MAX_EARLY_BYTES = 64 * 1024;

function rawHeaderLines(raw: readonly string[]): string {
  let text = '';
  for (let i = 0; i + 1 < raw.length; i += 2) text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  return text;
}

/** Default bound on the requests to one destination (node and address) awaiting their answer head. */
export const DEFAULT_MAX_AWAITING_PER_DESTINATION = 128;

export interface RequestInterceptorOptions {
  /** The node an address belongs to, so that a failed dial's reason names it. */
  nodeNameOf?: NodeNameOf;
  /**
   * Requests to one destination that may await their answer head at once;
   * more are answered 503 at once. Default DEFAULT_MAX_AWAITING_PER_DESTINATION.
   * A kubelet answers a head within moments, so only a stuck kubelet or a
   * request looping back into a tunnel server comes near it.
   */
  maxAwaitingPerDestination?: number;
  /** Counts the requests refused by that bound. */
  loopGuard?: LoopGuard;
}

export class RequestInterceptor {
  /** Failures are the callers' doing as often as not: a few lines per kind and interval. */
  private readonly limited: LogLimiter;
  /** Requests awaiting their answer head, by destination. */
  private readonly awaiting = new Map<string, number>();
  private readonly maxAwaiting: number;

  constructor(
    private readonly connector: KubeletConnector,
    private readonly log: Logger,
    private readonly opts: RequestInterceptorOptions = {},
  ) {
    this.limited = new LogLimiter(log);
    this.maxAwaiting = opts.maxAwaitingPerDestination ?? DEFAULT_MAX_AWAITING_PER_DESTINATION;
  }

  /**
   * Takes a place among the requests to `ctx`'s destination awaiting their
   * answer: the function that gives it back (once; later calls do nothing),
   * or undefined when the destination has no place left.
   */
  private awaitAnswer(ctx: RequestContext): (() => void) | undefined {
    const key = `${ctx.proxyHost ?? ''}|${ctx.dialAddress}`;
    const n = this.awaiting.get(key) ?? 0;
    if (n >= this.maxAwaiting) return undefined;
    this.awaiting.set(key, n + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = this.awaiting.get(key)! - 1;
      if (left === 0) this.awaiting.delete(key);
      else this.awaiting.set(key, left);
    };
  }

  /** The answer when a destination has no place left for another request awaiting its answer. */
  private tooManyAwaiting(ctx: RequestContext): { status: number; reason: string } {
    this.opts.loopGuard?.refused('waiting');
    const reason =
      `${this.maxAwaiting} requests to ${ctx.dialAddress}${ctx.proxyHost === undefined ? '' : ` on node ${ctx.proxyHost}`} already await ` +
      'its answer: the kubelet is not answering, or the requests loop back into a tunnel server; retry later';
    this.limited.warn('request to kubelet refused', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, url: ctx.url, status: 503, error: reason });
    return { status: 503, reason };
  }

  /** Requests to all destinations awaiting their answer head now. */
  get awaitingCount(): number {
    let n = 0;
    for (const v of this.awaiting.values()) n += v;
    return n;
  }

  private target(ctx: RequestContext): TunnelTarget {
    return { dialAddress: ctx.dialAddress, proxyHost: ctx.proxyHost, tls: ctx.tls };
  }

  private upstream(ctx: RequestContext, req: IncomingMessage, upgrade: boolean, signal: AbortSignal): ReturnType<typeof request> {
    const address = splitAddress(ctx.dialAddress)!;
    const options: RequestOptions & { tunnel: TunnelTarget; tunnelSignal: AbortSignal } = {
      agent: this.connector,
      host: address.host,
      port: address.port,
      method: req.method,
      path: ctx.url,
      // An array keeps the caller's header names and order (node ≥ 18.16 accepts rawHeaders form).
      headers: withLoopMark(withHost(forwardedHeaders(req.rawHeaders, upgrade), ctx.hostHeader)),
      setHost: false,
      tunnel: this.target(ctx),
      tunnelSignal: signal,
    };
    return request(options);
  }

  /** An ordinary request: streamed both ways. */
  handleRequest(ctx: RequestContext, req: IncomingMessage, res: ServerResponse): void {
    const answered = this.awaitAnswer(ctx);
    if (answered === undefined) {
      const { status, reason } = this.tooManyAwaiting(ctx);
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
      res.end(reason + '\n');
      return;
    }
    res.once('close', answered);
    // The caller went away: a dial still pending is cancelled (DIAL_CLS).
    const gone = new AbortController();
    const up = this.upstream(ctx, req, false, gone.signal);
    res.sendDate = false; // the kubelet's Date is passed on
    up.on('response', (answer: IncomingMessage) => {
      answered();
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardedHeaders(answer.rawHeaders, false));
      // Headers go out now: a log stream may send its first line much later.
      res.flushHeaders();
      answer.pipe(res);
      answer.on('error', (err) => abortResponse(res, err));
    });
    up.on('error', (err) => {
      answered();
      if (gone.signal.aborted) return; // nobody to answer
      if (res.headersSent) {
        abortResponse(res, err);
        return;
      }
      const { status, reason } = failureFor(err, ctx, this.opts.nodeNameOf);
      this.limited.warn('request to kubelet failed', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, url: ctx.url, status, error: reason });
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
      res.end(reason.replace(/[\r\n]+/g, ' ') + '\n');
    });
    // The caller went away: close the tunnel connection at once (a follow stream ends at the kubelet).
    res.on('close', () => {
      if (res.writableFinished) return;
      gone.abort();
      up.destroy();
    });
    req.pipe(up);
  }

  /**
   * An upgrade (exec, attach, port-forward): written and answered as raw
   * bytes, so both a 101 and a refusal reach the caller exactly as the kubelet
   * sent them; after a 101, bytes flow both ways until either side ends.
   */
  handleUpgrade(ctx: RequestContext, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const answered = this.awaitAnswer(ctx);
    if (answered === undefined) {
      const { status, reason } = this.tooManyAwaiting(ctx);
      socket.end(errorResponse(status, reason));
      return;
    }
    socket.once('close', answered);
    // Read while the kubelet's connection opens, so that a caller who leaves
    // is noticed and its dial cancelled (DIAL_CLS); what it sends meanwhile
    // is kept for the kubelet, up to a bound, after which reading pauses.
    const gone = new AbortController();
    const early: Buffer[] = head.length > 0 ? [head] : [];
    let earlyBytes = head.length;
    const onData = (chunk: Buffer): void => {
      early.push(chunk);
      earlyBytes += chunk.length;
      if (earlyBytes >= MAX_EARLY_BYTES) socket.pause();
    };
    const onGone = (): void => gone.abort();
    socket.on('data', onData);
    socket.once('end', onGone);
    socket.once('close', onGone);
    socket.resume();
    const stopWatching = (): void => {
      socket.off('data', onData);
      socket.off('end', onGone);
      socket.off('close', onGone);
      socket.pause();
    };
    this.connector.connect(this.target(ctx), gone.signal).then(
      (kubelet) => {
        stopWatching();
        if (socket.destroyed || gone.signal.aborted) {
          kubelet.destroy();
          socket.destroy();
          return;
        }
        kubelet.write(`${req.method} ${req.url} HTTP/1.1\r\n${rawHeaderLines(withLoopMark(forwardedHeaders(req.rawHeaders, true)))}\r\n`);
        for (const chunk of early) kubelet.write(chunk);
        readResponseHead(kubelet).then(
          (answer) => {
            answered();
            this.passAnswer(ctx, socket, kubelet, answer);
          },
          (err: unknown) => {
            answered();
            this.failUpgrade(ctx, socket, err, kubelet);
          },
        );
      },
      (err: unknown) => {
        answered();
        stopWatching();
        if (gone.signal.aborted) socket.destroy();
        else this.failUpgrade(ctx, socket, err);
      },
    );
  }

  private passAnswer(ctx: RequestContext, socket: Duplex, kubelet: Duplex, answer: RawResponseHead): void {
    if (socket.destroyed) {
      kubelet.destroy();
      return;
    }
    socket.write(answer.raw);
    if (answer.rest.length > 0) socket.write(answer.rest);
    if (answer.status === 101) {
      splice(socket, kubelet);
      return;
    }
    // Refused (e.g. 403 for a protocol the kubelet does not speak): relay the body, then close both.
    this.log.verbose(2, 'kubelet refused an upgrade', { node: ctx.proxyHost, url: ctx.url, status: answer.status });
    const length = Number(answer.headers.get('content-length') ?? NaN);
    let left = Number.isNaN(length) ? Infinity : length - answer.rest.length;
    const done = (): void => {
      kubelet.destroy();
      socket.end();
    };
    // The kubelet may have closed with its answer (the head and its EOF read together).
    if (left <= 0 || kubelet.readableEnded) {
      done();
      return;
    }
    kubelet.on('data', (chunk: Buffer) => {
      socket.write(chunk.subarray(0, Math.min(chunk.length, left)));
      left -= chunk.length;
      if (left <= 0) done();
    });
    kubelet.once('end', done);
    kubelet.once('error', done);
    socket.once('close', () => kubelet.destroy());
    kubelet.resume();
  }

  private failUpgrade(ctx: RequestContext, socket: Duplex, err: unknown, kubelet?: Duplex): void {
    kubelet?.destroy();
    if (socket.destroyed) return;
    const { status, reason } = failureFor(err, ctx, this.opts.nodeNameOf);
    this.limited.warn('upgrade request to kubelet failed', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, url: ctx.url, status, error: reason });
    socket.end(errorResponse(status, reason));
  }
}
