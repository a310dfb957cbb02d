// The meta server: /healthz (the process answers), /readyz (Kubernetes-style
// named checks, `?verbose` lists each), /metrics (Prometheus text from one
// registry), /debug/flags/v (the log verbosity; set with PUT from loopback),
// and JSON /debug/* routes its owner adds. Loopback by default:
// it says a lot about the tunnel and has no authentication of its own.
// A caller has the head timeout for each request head (then 408 and closed,
// even if it never closes its end) and at most maxConnections connections are
// open at once (more are closed as they are accepted): a flood of slow callers
// cannot hold the process's descriptors.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from '../log/logger.js';
import { answerAndClose, errorResponse } from '../frontend/http-answer.js';
import { LogLimiter } from '../log/log-limiter.js';
import { ConnectionSet } from '../net/connection-set.js';
import { DEFAULT_REQUEST_HEAD_TIMEOUT_MS, httpTimeouts } from '../net/http-timeouts.js';
import { listen, stopListening } from '../net/listen.js';
import { asError, errorCode, errorMessage } from '../protocol/errors.js';
import { FLAGS_V_PATH, serveFlagsV } from './flags-v.js';

/** A readiness check: undefined when ready, else why not. */
export type ReadyCheck = () => string | undefined;

/** A debug route: the query, and what to answer as JSON, or a promise of it (or an error status). */
export type DebugRoute = (query: URLSearchParams) => unknown;

/** A route that writes its own answer (profiles, heap snapshots). */
export type RawRoute = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) => void | Promise<void>;

/** Connections a meta port keeps open at once by default: probes, scrapes and the agents command need a few. */
export const DEFAULT_META_MAX_CONNECTIONS = 64;

/** How long an idle keep-alive connection stays open. */
const KEEP_ALIVE_TIMEOUT_MS = 5000;

export interface MetaServerOptions {
  host: string;
  port: number;
  /** Time for each request head. Default DEFAULT_REQUEST_HEAD_TIMEOUT_MS (the server passes --request-head-timeout). */
  headTimeoutMs?: number;
  /** Connections open at once. Default DEFAULT_META_MAX_CONNECTIONS. */
  maxConnections?: number;
  registry: Registry;
  readyChecks: Record<string, ReadyCheck>;
  debug?: Record<string, DebugRoute>;
  raw?: Record<string, RawRoute>;
  logger: Logger;
}

export class MetaServer {
  private readonly server: Server;
  private readonly sockets = new ConnectionSet();
  private readonly limited: LogLimiter;
  private readonly headTimeoutMs: number;
  /** Sockets already being closed after a client error (Node may report one more than once). */
  private readonly answered = new WeakSet<object>();
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: MetaServerOptions) {
    this.limited = new LogLimiter(opts.logger);
    this.headTimeoutMs = opts.headTimeoutMs ?? DEFAULT_REQUEST_HEAD_TIMEOUT_MS;
    this.server = createServer(httpTimeouts(this.headTimeoutMs, KEEP_ALIVE_TIMEOUT_MS), (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        opts.logger.error('meta server: internal error', { url: req.url, error: errorMessage(err), stack: asError(err).stack });
        if (!res.headersSent) res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end(`internal error: ${errorMessage(err)}\n`);
      });
    });
    this.server.maxConnections = opts.maxConnections ?? DEFAULT_META_MAX_CONNECTIONS;
    this.server.on('connection', (s: Socket) => this.sockets.add(s));
    this.server.on('clientError', (err: Error, socket: Socket) => this.onClientError(err, socket));
    this.server.on('drop', () =>
      this.limited.warn('meta port has as many connections as it takes; a new one was closed', { maxConnections: this.server.maxConnections }),
    );
  }

  async start(): Promise<void> {
    await listen(this.server, { port: this.opts.port, host: this.opts.host }, { name: 'meta port', logger: this.opts.logger, flag: '--meta-port' });
  }

  /** Connections open now. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  /**
   * A request head that was malformed or not complete in time. The answer
   * closes the connection whatever the caller does (answerAndClose): one only
   * ended would stay open for as long as the caller kept its own end open.
   */
  private onClientError(err: Error, socket: Socket): void {
    if (this.answered.has(socket)) return;
    this.answered.add(socket);
    let response: string;
    if (errorCode(err) === 'ERR_HTTP_REQUEST_TIMEOUT') {
      this.limited.warn('meta port caller sent no complete request head in time; closed', { timeoutMs: this.headTimeoutMs });
      response = errorResponse(408, `no complete request head within ${this.headTimeoutMs} ms`);
    } else {
      response = errorResponse(400, `malformed request: ${errorMessage(err)}`);
    }
    if (socket.writable) answerAndClose(socket, response);
    else socket.destroy();
  }

  get address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://meta');
    const path = url.pathname;
    if (path === FLAGS_V_PATH) {
      await serveFlagsV(req, res, this.opts.logger, this.limited);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      text(res, 405, `${req.method} is not allowed; the meta server answers GET\n`, { Allow: 'GET, HEAD' });
      return;
    }
    if (path === '/healthz' || path === '/livez') {
      text(res, 200, 'ok');
      return;
    }
    if (path === '/readyz') {
      this.readyz(res, url.searchParams.has('verbose'));
      return;
    }
    if (path === '/metrics') {
      const body = await this.opts.registry.metrics();
      text(res, 200, body, { 'Content-Type': this.opts.registry.contentType });
      return;
    }
    const raw = this.opts.raw?.[path];
    if (raw !== undefined) {
      await raw(req, res, url.searchParams);
      return;
    }
    const debug = this.opts.debug?.[path];
    if (debug !== undefined) {
      const body = await debug(url.searchParams);
      text(res, 200, `${JSON.stringify(body, jsonValue, 2)}\n`, { 'Content-Type': 'application/json' });
      return;
    }
    const known = ['/healthz', '/readyz', '/metrics', ...Object.keys(this.opts.debug ?? {}), FLAGS_V_PATH, ...Object.keys(this.opts.raw ?? {})];
    text(res, 404, `not found: ${path}; this server answers ${known.join(', ')}\n`);
  }

  private readyz(res: ServerResponse, verbose: boolean): void {
    const lines: string[] = [];
    let ready = true;
    for (const [name, check] of Object.entries(this.opts.readyChecks)) {
      let why: string | undefined;
      try {
        why = check();
      } catch (err: unknown) {
        why = `check failed: ${errorMessage(err)}`;
      }
      if (why === undefined) lines.push(`[+]${name} ok`);
      else {
        ready = false;
        lines.push(`[-]${name} failed: ${why}`);
      }
    }
    if (ready && !verbose) {
      text(res, 200, 'ok');
      return;
    }
    lines.push(ready ? 'readyz check passed' : 'readyz check failed');
    text(res, ready ? 200 : 503, `${lines.join('\n')}\n`);
  }

  /** Stops listening and closes every connection. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.closing = stopListening(this.server);
      this.sockets.destroyAll();
    }
    return this.closing;
  }
}

function text(res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** JSON for bigint ids and Dates. */
function jsonValue(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}
