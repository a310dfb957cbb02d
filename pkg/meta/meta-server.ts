// The meta server: /healthz (the process answers), /readyz (Kubernetes-style
// named checks, `?verbose` lists each), /metrics (Prometheus text from one
// registry), and JSON /debug/* routes its owner adds. Loopback by default:
// it says a lot about the tunnel and has no authentication of its own.

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from '../log/logger.js';
import { ConnectionSet } from '../net/connection-set.js';
import { listen, stopListening } from '../net/listen.js';
import { asError, errorMessage } from '../protocol/errors.js';

/** A readiness check: undefined when ready, else why not. */
export type ReadyCheck = () => string | undefined;

/** A debug route: the query, and what to answer as JSON, or a promise of it (or an error status). */
export type DebugRoute = (query: URLSearchParams) => unknown;

/** A route that writes its own answer (profiles, heap snapshots). */
export type RawRoute = (req: IncomingMessage, res: ServerResponse, query: URLSearchParams) => void | Promise<void>;

export interface MetaServerOptions {
  host: string;
  port: number;
  registry: Registry;
  readyChecks: Record<string, ReadyCheck>;
  debug?: Record<string, DebugRoute>;
  raw?: Record<string, RawRoute>;
  logger: Logger;
}

export class MetaServer {
  private readonly server: Server;
  private readonly sockets = new ConnectionSet();
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: MetaServerOptions) {
    this.server = createServer({ keepAliveTimeout: 5000 }, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        opts.logger.error('meta server: internal error', { url: req.url, error: errorMessage(err), stack: asError(err).stack });
        if (!res.headersSent) res.writeHead(500, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end(`internal error: ${errorMessage(err)}\n`);
      });
    });
    this.server.on('connection', (s: Socket) => this.sockets.add(s));
    this.server.on('clientError', (_err: Error, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
      else socket.destroy();
    });
  }

  async start(): Promise<void> {
    await listen(this.server, { port: this.opts.port, host: this.opts.host }, { name: 'meta port', logger: this.opts.logger });
  }

  get address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://meta');
    const path = url.pathname;
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
    const known = ['/healthz', '/readyz', '/metrics', ...Object.keys(this.opts.debug ?? {}), ...Object.keys(this.opts.raw ?? {})];
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
