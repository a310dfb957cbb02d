// The master ports, where kube-apiserver, metrics-server and Prometheus reach
// edge kubelets (DNS or iptables send them here):
// - secure (--secure-port, 10263): HTTPS, HTTP/1.1 only so upgrades work, and a
//   client certificate from --client-ca-file is required;
// - insecure (--insecure-port, 10264): plain HTTP, on loopback unless the
//   operator binds it elsewhere;
// - proxy (--http-proxy-port, off by default): an HTTP proxy for cloud
//   clients (http-proxy.ts), TLS with client certificates as the secure port.
// Each request runs the middleware chain (trace, localhost) and then the
// interceptor, which carries it through the tunnel. A caller whose stream is
// cut by a failure has its TCP connection reset, on the secure port too
// (beneath its TLS session: see abortsThrough).
// A caller gets a bounded time for its TLS handshake and for its request head;
// one that takes longer is closed, logged (a few lines per kind and interval)
// and counted.

import { createServer as createHTTPServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHTTPSServer, type Server as HTTPSServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { Counter, Gauge, type Registry } from '../metrics/prom.js';
import { answerAndClose, errorResponse } from '../frontend/http-answer.js';
import { controlCharacterReason } from '../frontend/request-head.js';
import { LogLimiter } from '../log/log-limiter.js';
import { abortsThrough } from '../mux/abort.js';
import type { Logger } from '../log/logger.js';
import { CallerRefusals, tlsRefusal, type RefusalReason } from '../net/caller-refusals.js';
import { ConnectionSet } from '../net/connection-set.js';
import { DEFAULT_REQUEST_HEAD_TIMEOUT_MS, httpTimeouts } from '../net/http-timeouts.js';
import { listen, stopListening } from '../net/listen.js';
import { errorCode, errorMessage } from '../protocol/errors.js';
import { HttpError } from './errors.js';
import type { LoopGuard } from '../frontend/loop-guard.js';
import { markedByTunnel } from './loop-mark.js';
import type { HttpProxy } from './http-proxy.js';
import type { Middleware } from './middleware/middleware.js';
import { PROXY_DEST_HEADER, PROXY_HOST_HEADER, pathClass, type RequestContext } from './request-context.js';
import type { RequestInterceptor } from './request-interceptor.js';

export interface SecurePortOptions {
  host: string;
  port: number;
  cert: string;
  key: string;
  /** CA that signs the callers' client certificates (kube-apiserver's kubelet client). */
  clientCA: string;
}

/** Default time a caller on the secure port has to finish its TLS handshake. */
export const DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS = 10_000;
/** How long a caller's idle keep-alive connection stays open. */
const KEEP_ALIVE_TIMEOUT_MS = 60_000;

/** The master server's ports. */
export type MasterPortName = 'secure' | 'insecure' | 'proxy';

const PORT_TEXT: Record<MasterPortName, string> = { secure: 'secure master port', insecure: 'insecure master port', proxy: 'HTTP proxy port' };
const PORT_FLAG: Record<MasterPortName, string> = { secure: '--secure-port', insecure: '--insecure-port', proxy: '--http-proxy-port' };

export interface MasterServerOptions {
  secure?: SecurePortOptions;
  insecure?: { host: string; port: number };
  /** The HTTP proxy port: its TLS as the secure port's, and the proxy that serves it. */
  proxy?: SecurePortOptions & { handler: HttpProxy };
  /** Default DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS. */
  tlsHandshakeTimeoutMs?: number;
  /** Time for each request head (after its TLS handshake, on the secure port). Default DEFAULT_REQUEST_HEAD_TIMEOUT_MS. */
  requestHeadTimeoutMs?: number;
  middleware: Middleware[];
  interceptor: RequestInterceptor;
  /** Counts the requests refused for carrying a tunnel server's mark (loop-mark.ts); they are refused without it too. */
  loopGuard?: LoopGuard;
  logger: Logger;
  metricsRegistry?: Registry;
}

function headerOf(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  const s = Array.isArray(v) ? v[0] : v;
  return s === undefined || s === '' ? undefined : s;
}

function servernameOf(req: IncomingMessage): string | undefined {
  const name = (req.socket as TLSSocket).servername;
  return typeof name === 'string' && name !== '' ? name : undefined;
}

export class MasterServer {
  private readonly servers: Array<{ server: Server; name: MasterPortName; host: string; port: number }> = [];
  private readonly sockets = new ConnectionSet();
  private readonly inFlight: Gauge<'verb' | 'path'>;
  private readonly total: Counter<'verb' | 'path'>;
  private readonly limited: LogLimiter;
  private readonly tlsHandshakeTimeoutMs: number;
  private readonly requestHeadTimeoutMs: number;
  /** TLS sockets whose handshake finished. */
  private readonly secured = new WeakSet<object>();
  /** Sockets with a response under way: an error then cannot be answered with a status of its own. */
  private readonly responding = new WeakSet<object>();
  /** Sockets already being closed after a client error. */
  private readonly answered = new WeakSet<object>();
  /** Callers each port closed before their request, by why. */
  private readonly refused: Record<MasterPortName, CallerRefusals>;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: MasterServerOptions) {
    this.limited = new LogLimiter(opts.logger);
    this.tlsHandshakeTimeoutMs = opts.tlsHandshakeTimeoutMs ?? DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS;
    this.requestHeadTimeoutMs = opts.requestHeadTimeoutMs ?? DEFAULT_REQUEST_HEAD_TIMEOUT_MS;
    const registers = opts.metricsRegistry ? [opts.metricsRegistry] : [];
    const reasons = ['tls_handshake_timeout', 'tls_error', 'head_timeout'] as const;
    this.refused = {
      secure: new CallerRefusals('secure', reasons, opts.metricsRegistry),
      insecure: new CallerRefusals('insecure', reasons, opts.metricsRegistry),
      proxy: new CallerRefusals('http_proxy', reasons, opts.metricsRegistry),
    };
    this.inFlight = new Gauge({
      name: 'yurttunnel_server_in_proxy_requests',
      help: 'Requests to kubelets in flight through the master ports, by verb and path class.',
      labelNames: ['verb', 'path'],
      registers,
    });
    this.total = new Counter({
      name: 'yurttunnel_server_proxy_requests_total',
      help: 'Requests to kubelets through the master ports, by verb and path class.',
      labelNames: ['verb', 'path'],
      registers,
    });
    if (opts.secure !== undefined) this.wireSecure('secure', opts.secure);
    if (opts.insecure !== undefined) {
      const server = createHTTPServer(httpTimeouts(this.requestHeadTimeoutMs, KEEP_ALIVE_TIMEOUT_MS), (req, res) => this.onRequest(req, res, 'insecure'));
      this.wire(server, 'insecure', opts.insecure.host, opts.insecure.port, false);
    }
    if (opts.proxy !== undefined) {
      const handler = opts.proxy.handler;
      const server = this.wireSecure('proxy', opts.proxy);
      server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) =>
        this.guarded(
          'connect',
          req,
          (message) => socket.end(errorResponse(500, message)),
          () => handler.handleConnect(req, socket, head),
        ),
      );
    }
  }

  /** An HTTPS port whose callers need a client certificate from `s.clientCA`. */
  private wireSecure(name: 'secure' | 'proxy', s: SecurePortOptions): Server {
    const server = createHTTPSServer(
      {
        cert: s.cert,
        key: s.key,
        ca: s.clientCA,
        requestCert: true,
        rejectUnauthorized: true,
        minVersion: 'TLSv1.2',
        // HTTP/1.1 only: exec, attach and port-forward are HTTP/1.1 upgrades.
        ALPNProtocols: ['http/1.1'],
        handshakeTimeout: this.tlsHandshakeTimeoutMs,
        ...httpTimeouts(this.requestHeadTimeoutMs, KEEP_ALIVE_TIMEOUT_MS),
      },
      (req, res) => this.onRequest(req, res, name),
    );
    // The TCP socket each TLS session runs over, so that an abort can reset it.
    const tcpByPeer = new Map<string, Socket>();
    const peer = (s: Socket): string | undefined => (s.remotePort === undefined ? undefined : `${s.remoteAddress}|${s.remotePort}`);
    server.on('connection', (socket: Socket) => {
      const key = peer(socket);
      if (key === undefined) return;
      tcpByPeer.set(key, socket);
      socket.once('close', () => {
        if (tcpByPeer.get(key) === socket) tcpByPeer.delete(key);
      });
    });
    server.on('secureConnection', (tls: TLSSocket) => {
      this.secured.add(tls);
      const key = peer(tls);
      const tcp = key === undefined ? undefined : tcpByPeer.get(key);
      if (tcp === undefined) return;
      tcpByPeer.delete(key!);
      abortsThrough(tls, tcp);
    });
    server.on('tlsClientError', (err: Error, socket: TLSSocket) => this.onTLSError(name, err, socket));
    this.wire(server, name, s.host, s.port, true);
    return server;
  }

  /**
   * A TLS handshake that failed or took too long. The socket is destroyed
   * here: an answer written to it could never be flushed, and a socket only
   * ended would stay open (CLOSE-WAIT) after the caller went away.
   */
  private onTLSError(name: 'secure' | 'proxy', err: Error, socket: TLSSocket): void {
    const refusal = tlsRefusal(err, socket);
    const soFar = this.refused[name].add(refusal.reason);
    if (refusal.reason === 'tls_handshake_timeout') {
      this.limited.warn(`caller did not finish its TLS handshake in time on the ${PORT_TEXT[name]}; closed`, {
        timeoutMs: this.tlsHandshakeTimeoutMs,
        closedSoFar: soFar,
      });
    } else {
      this.limited.warn(`caller refused on the ${PORT_TEXT[name]}`, { error: refusal.error, refusedSoFar: soFar });
    }
    socket.destroy();
  }

  private wire(server: Server, name: MasterPortName, host: string, port: number, tls: boolean): void {
    // Raw connections, so that one still in its TLS handshake is closed on close() too.
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      // Beneath a TLS session nobody else listens: a failed reset must not end the process.
      socket.on('error', (err) => this.opts.logger.verbose(3, 'caller connection error', { port: name, error: errorMessage(err) }));
    });
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket, head, name));
    server.on('clientError', (err: Error, socket: Socket) => this.onClientError(name, tls, err, socket));
    this.servers.push({ server, name, host, port });
  }

  /** A request head that was malformed or did not come in time (Node may report one socket more than once). */
  private onClientError(name: MasterPortName, tls: boolean, err: Error, socket: Socket): void {
    if (this.answered.has(socket)) return;
    this.answered.add(socket);
    if (tls && !this.secured.has(socket)) {
      // Its TLS handshake failed: onTLSError has said why.
      socket.destroy();
      return;
    }
    const code = errorCode(err);
    let status = 400;
    let message = `malformed request: ${errorMessage(err)}`;
    if (code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      this.limited.warn('caller sent no complete request head in time; closed', {
        port: name,
        timeoutMs: this.requestHeadTimeoutMs,
        closedSoFar: this.refused[name].add('head_timeout'),
      });
      status = 408;
      message = `no complete request head within ${this.requestHeadTimeoutMs} ms`;
    } else {
      // Node's parser says "Invalid header value char" but not where: say which header (or the request line) and which character.
      const raw = (err as { rawPacket?: unknown }).rawPacket;
      const control = Buffer.isBuffer(raw) ? controlCharacterReason(raw) : undefined;
      if (control !== undefined) message = `malformed request: ${control}`;
      this.limited.verbose(2, `malformed request on the ${PORT_TEXT[name]}`, { port: name, error: control ?? errorMessage(err) });
      if (code === 'HPE_HEADER_OVERFLOW') status = 431;
    }
    if (!socket.writable || this.responding.has(socket)) socket.destroy();
    else answerAndClose(socket, errorResponse(status, message));
  }

  /** Serves a new certificate (and caller CA) on the secure and HTTP proxy ports from the next handshake on. */
  setTLS(tls: { cert: string; key: string; clientCA: string }): void {
    for (const s of this.servers) {
      if (s.name === 'insecure') continue;
      (s.server as HTTPSServer).setSecureContext({ cert: tls.cert, key: tls.key, ca: tls.clientCA, minVersion: 'TLSv1.2' });
      this.opts.logger.info(`serving certificate replaced on the ${PORT_TEXT[s.name]} for new connections`);
    }
  }

  async start(): Promise<void> {
    for (const s of this.servers) {
      await listen(
        s.server,
        { port: s.port, host: s.host },
        {
          name: PORT_TEXT[s.name],
          logger: this.opts.logger,
          flag: PORT_FLAG[s.name],
        },
      );
      this.opts.logger.info(s.name === 'proxy' ? 'HTTP proxy listening' : `master server listening (${s.name})`, { address: this.addressText(s.server) });
    }
  }

  private addressText(server: Server): string {
    const a = server.address() as AddressInfo;
    return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  }

  /** Callers `port` closed before their request so far, by why. */
  refusedCallers(port: MasterPortName): Readonly<Partial<Record<RefusalReason, number>>> {
    return this.refused[port].counts;
  }

  /** Connections open on both ports, handshaking ones included. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  /** Bound address of the secure (or insecure) port. */
  address(name: MasterPortName): AddressInfo {
    const s = this.servers.find((x) => x.name === name);
    if (s === undefined) throw new TypeError(`the ${name} master port is not configured`);
    return s.server.address() as AddressInfo;
  }

  private context(req: IncomingMessage, tls: boolean): RequestContext {
    return {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      tls,
      dialAddress: headerOf(req, 'host') ?? '',
      proxyHost: headerOf(req, PROXY_HOST_HEADER),
      proxyDest: headerOf(req, PROXY_DEST_HEADER),
      forwardedUri: headerOf(req, 'x-forwarded-uri'),
      serverName: tls ? servernameOf(req) : undefined,
      via: headerOf(req, 'via'),
    };
  }

  /** Runs the middleware; on an HttpError returns it for the caller. */
  private route(ctx: RequestContext): HttpError | undefined {
    try {
      if (markedByTunnel(ctx.via)) {
        this.opts.loopGuard?.refused('via');
        throw new HttpError(
          508,
          `request for ${ctx.dialAddress} refused: it already passed through a yurt-tunnel-server (its Via says so), so it came ` +
            'out of a tunnel into a tunnel server and would loop; address the node itself (its name, or its IP and kubelet port), not the tunnel server',
        );
      }
      for (const m of this.opts.middleware) m(ctx);
      return undefined;
    } catch (err: unknown) {
      if (err instanceof HttpError) {
        this.limited.warn('request refused', { url: ctx.url, host: ctx.dialAddress, status: err.status, error: err.message });
        return err;
      }
      throw err;
    }
  }

  private track(ctx: RequestContext, done: (fn: () => void) => void): void {
    const labels = { verb: ctx.method.toLowerCase(), path: pathClass(ctx.url) };
    this.total.inc(labels);
    this.inFlight.inc(labels);
    done(() => this.inFlight.dec(labels));
  }

  /**
   * The boundary of every request: whatever a handler throws is answered
   * (500, or the connection dropped once the answer has begun) and logged with
   * its stack; one bad request never ends the process.
   */
  private guarded(what: string, req: IncomingMessage, answer: (message: string) => void, handle: () => void): void {
    try {
      handle();
    } catch (err: unknown) {
      this.opts.logger.error('internal error handling a request; answered 500', {
        kind: what,
        url: req.url?.slice(0, 200),
        error: errorMessage(err),
        stack: err instanceof Error ? err.stack : undefined,
      });
      answer(`internal error in yurt-tunnel-server: ${errorMessage(err)}`);
    }
  }

  /** Whether `name` is configured. */
  has(name: MasterPortName): boolean {
    return this.servers.some((s) => s.name === name);
  }

  private onRequest(req: IncomingMessage, res: ServerResponse, port: MasterPortName): void {
    const socket = req.socket;
    this.responding.add(socket);
    res.once('close', () => this.responding.delete(socket));
    this.guarded(
      'request',
      req,
      (message) => {
        if (res.headersSent) {
          res.destroy();
          return;
        }
        res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
        res.end(message + '\n');
      },
      () => (port === 'proxy' ? this.opts.proxy!.handler.handleRequest(req, res) : this.handleRequest(req, res, port === 'secure')),
    );
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, port: MasterPortName): void {
    this.guarded(
      'upgrade',
      req,
      (message) => {
        if (socket.destroyed) return;
        socket.end(errorResponse(500, message));
      },
      () => (port === 'proxy' ? this.opts.proxy!.handler.handleUpgrade(socket) : this.handleUpgrade(req, socket, head, port === 'secure')),
    );
  }

  private handleRequest(req: IncomingMessage, res: ServerResponse, tls: boolean): void {
    const ctx = this.context(req, tls);
    const refused = this.route(ctx);
    if (refused !== undefined) {
      res.writeHead(refused.status, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end(refused.message + '\n');
      return;
    }
    this.track(ctx, (release) => res.once('close', release));
    this.opts.interceptor.handleRequest(ctx, req, res);
  }

  private handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, tls: boolean): void {
    const ctx = this.context(req, tls);
    const refused = this.route(ctx);
    if (refused !== undefined) {
      socket.end(errorResponse(refused.status, refused.message));
      return;
    }
    this.track(ctx, (release) => socket.once('close', release));
    this.opts.interceptor.handleUpgrade(ctx, req, socket, head);
  }

  /** Takes no new callers and drops idle keep-alive connections (callers then go elsewhere); requests in flight go on. */
  stopAccepting(): void {
    for (const { server } of this.servers) {
      if (server.listening) server.close();
      server.closeIdleConnections();
    }
  }

  /** Stops listening and closes every caller's connection. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.limited.flush();
      this.opts.proxy?.handler.flush();
      const closed = this.servers.map((s) => stopListening(s.server));
      this.sockets.destroyAll();
      await Promise.all(closed);
    })();
    return this.closing;
  }
}
