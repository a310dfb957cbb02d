// The HTTP proxy for cloud clients (--http-proxy-port): what Prometheus's
// proxy_url, and any HTTP client's proxy setting, speaks.
// - An absolute-URI request (`GET http://edge-1:9100/metrics`) is sent on in
//   origin form with the URI's authority as its Host, through the request
//   interceptor the master ports use (hop-by-hop headers dropped, our Via
//   added, the answer streamed back);
// - `CONNECT host:port` is answered 200 once the tunnelled connection is open
//   (https targets: TLS runs end to end, between the client and the target).
// The destination's host is a node name (sent to the node's address) or an
// address, routed as the master ports route a Host (trace-request.ts), and
// its port must be in the allow-list (--http-proxy-allowed-ports, or the
// server ConfigMap's http-proxy-allowed-ports): anything else is 403 with a
// reason. The listener itself, TLS with client certificates from
// --client-ca-file, is one of the master server's ports (master-server.ts).

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { NodeNameOf } from '../frontend/dial-reason.js';
import { CONNECTION_ESTABLISHED, errorResponse } from '../frontend/http-answer.js';
import type { LoopGuard } from '../frontend/loop-guard.js';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { Counter, type Registry } from '../metrics/prom.js';
import { splice } from '../mux/splice.js';
import type { NodeResolver } from '../nodes/node-resolver.js';
import { errorMessage } from '../protocol/errors.js';
import { HttpError } from './errors.js';
import type { KubeletConnector } from './kubelet-connector.js';
import { markedByTunnel } from './loop-mark.js';
import { localhostProxy } from './middleware/localhost-proxy.js';
import type { Middleware } from './middleware/middleware.js';
import { routeByHost } from './middleware/trace-request.js';
import { joinAddress, splitAddress, type RequestContext } from './request-context.js';
import { failureFor, type RequestInterceptor } from './request-interceptor.js';

export interface HttpProxyOptions {
  resolver: NodeResolver;
  /** Destination ports a caller may reach; read on every request, so a reloaded configuration applies at once. */
  allowedPorts: () => ReadonlySet<number>;
  /** Ports served on the node's loopback (localhost-proxy-ports), as on the master ports. */
  localhostPorts: () => ReadonlySet<number>;
  interceptor: RequestInterceptor;
  /** Opens the tunnelled connections of CONNECT. */
  connector: KubeletConnector;
  nodeNameOf?: NodeNameOf;
  loopGuard?: LoopGuard;
  logger: Logger;
  metricsRegistry?: Registry;
}

/** What became of a request: forwarded (into the tunnel: a failed dial is in yurttunnel_server_dial_failures_total), or why not. */
export type HttpProxyResult = 'forwarded' | 'port_not_allowed' | 'bad_request' | 'loop' | 'not_supported';

/** `http://host[:port]/path?query` → destination host:port, the Host to send, and the origin-form target. */
export function absoluteTarget(url: string): { address: string; host: string; path: string } | HttpError {
  const m = /^http:\/\/([^/?#@\s]+)([/?][^#\s]*)?$/i.exec(url);
  if (m === null) {
    if (/^https:\/\//i.test(url)) return new HttpError(400, `${url.slice(0, 200)}: for an https target use CONNECT (set the proxy for https too)`);
    return new HttpError(400, `request target ${JSON.stringify(url.slice(0, 200))} is not an absolute http:// URI: this port is an HTTP proxy`);
  }
  const authority = m[1]!;
  const path = m[2] ?? '/';
  const withPort = /:\d+$/.test(authority) ? authority : `${authority}:80`;
  const address = splitAddress(withPort);
  if (address === undefined) return new HttpError(400, `${JSON.stringify(authority.slice(0, 200))} in the request target is not host[:port]`);
  return { address: joinAddress(address.host, address.port), host: authority, path: path.startsWith('?') ? `/${path}` : path };
}

export class HttpProxy {
  private readonly limited: LogLimiter;
  private readonly total: Counter<'method' | 'result'>;
  private readonly localhost: Middleware;

  constructor(private readonly opts: HttpProxyOptions) {
    this.limited = new LogLimiter(opts.logger);
    this.localhost = localhostProxy(opts.localhostPorts, opts.resolver);
    this.total = new Counter({
      name: 'yurttunnel_server_http_proxy_requests_total',
      help:
        'Requests to the HTTP proxy port (--http-proxy-port), by method (connect, or other for absolute-URI requests) and result: ' +
        'forwarded into the tunnel (failed dials are in yurttunnel_server_dial_failures_total), port_not_allowed (403), ' +
        'bad_request (400: not a proxy request, an unknown node), loop (508), not_supported (upgrades).',
      labelNames: ['method', 'result'],
      registers: opts.metricsRegistry === undefined ? [] : [opts.metricsRegistry],
    });
  }

  /** Flushes the summary lines of the log limiter (on close). */
  flush(): void {
    this.limited.flush();
  }

  private context(req: IncomingMessage, dialAddress: string, url: string, hostHeader: string | undefined): RequestContext {
    const via = req.headers.via;
    return {
      method: req.method ?? 'GET',
      url,
      // The caller's TLS ends here: an http:// target is plain HTTP, a CONNECT carries the caller's own TLS.
      tls: false,
      dialAddress,
      proxyHost: undefined,
      proxyDest: undefined,
      forwardedUri: undefined,
      serverName: undefined,
      hostHeader,
      via: via === '' ? undefined : via,
    };
  }

  /** The checks before a dial: the allow-list, the loop mark, then the node. Returns the refusal, or undefined. */
  private route(ctx: RequestContext, method: 'connect' | 'other'): HttpError | undefined {
    try {
      const dest = splitAddress(ctx.dialAddress);
      if (dest === undefined) throw new HttpError(400, `destination ${JSON.stringify(ctx.dialAddress.slice(0, 200))} is not host:port`);
      const allowed = this.opts.allowedPorts();
      if (!allowed.has(dest.port)) {
        throw new HttpError(
          403,
          `port ${dest.port} of ${dest.host} is not open to the HTTP proxy: allowed ports are ${[...allowed].join(',') || 'none'} ` +
            '(--http-proxy-allowed-ports, or http-proxy-allowed-ports in the server ConfigMap)',
        );
      }
      if (markedByTunnel(ctx.via)) {
        this.opts.loopGuard?.refused('via');
        throw new HttpError(508, `request for ${ctx.dialAddress} refused: it already passed through a yurt-tunnel-server (its Via says so) and would loop`);
      }
      routeByHost(ctx, this.opts.resolver);
      this.localhost(ctx);
      return undefined;
    } catch (err: unknown) {
      if (!(err instanceof HttpError)) throw err;
      this.refuse(method, ctx.dialAddress, err);
      return err;
    }
  }

  private refuse(method: 'connect' | 'other', destination: string, err: HttpError): void {
    const result: HttpProxyResult = err.status === 403 ? 'port_not_allowed' : err.status === 508 ? 'loop' : 'bad_request';
    this.total.inc({ method, result });
    this.limited.warn('HTTP proxy request refused', { destination: destination.slice(0, 200), status: err.status, error: err.message });
  }

  /** An absolute-URI request: forwarded in origin form, its answer streamed back. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void {
    const target = absoluteTarget(req.url ?? '');
    const refused = target instanceof HttpError ? target : undefined;
    const ctx = target instanceof HttpError ? undefined : this.context(req, target.address, target.path, target.host);
    if (refused !== undefined) this.refuse('other', req.url ?? '', refused);
    const why = refused ?? this.route(ctx!, 'other');
    if (why !== undefined) {
      res.writeHead(why.status, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(why.message + '\n');
      return;
    }
    this.total.inc({ method: 'other', result: 'forwarded' });
    this.opts.interceptor.handleRequest(ctx!, req, res);
  }

  /** An upgrade through the proxy is not offered: WebSocket clients use CONNECT. */
  handleUpgrade(socket: Duplex): void {
    this.total.inc({ method: 'other', result: 'not_supported' });
    socket.end(errorResponse(501, 'upgrades through this HTTP proxy are not supported: use CONNECT (e.g. for ws:// and wss:// targets)'));
  }

  /** CONNECT host:port: 200 once the tunnelled connection is open, then bytes both ways. */
  handleConnect(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const ctx = this.context(req, req.url ?? '', req.url ?? '', undefined);
    const refused = this.route(ctx, 'connect');
    if (refused !== undefined) {
      socket.end(errorResponse(refused.status, refused.message, {}, { reasonInStatusLine: true }));
      return;
    }
    this.total.inc({ method: 'connect', result: 'forwarded' });
    // The caller went away while its dial was pending: cancelled (DIAL_CLS). What it sent meanwhile waits in the socket.
    const gone = new AbortController();
    const onGone = (): void => gone.abort();
    socket.once('close', onGone);
    this.opts.connector.connect({ dialAddress: ctx.dialAddress, proxyHost: ctx.proxyHost, tls: false }, gone.signal).then(
      (conn) => {
        socket.off('close', onGone);
        if (socket.destroyed || gone.signal.aborted) {
          conn.destroy();
          socket.destroy();
          return;
        }
        socket.write(CONNECTION_ESTABLISHED);
        if (head.length > 0) conn.write(head);
        splice(socket, conn);
      },
      (err: unknown) => {
        socket.off('close', onGone);
        if (socket.destroyed || gone.signal.aborted) {
          socket.destroy();
          return;
        }
        const { status, reason } = failureFor(err, ctx, this.opts.nodeNameOf);
        this.limited.warn('HTTP proxy CONNECT failed', { node: ctx.proxyHost, dialAddress: ctx.dialAddress, status, error: errorMessage(err) });
        socket.end(errorResponse(status, reason, {}, { reasonInStatusLine: true }));
      },
    );
  }
}
