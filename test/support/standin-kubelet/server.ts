// A stand-in kubelet for tests and the demo: an HTTPS server that requires a
// client certificate and answers the kubelet paths kube-apiserver uses
// (node proxy, container logs, exec/attach, port-forward), recording what it
// saw. close() frees every socket, session and timer it made.

import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { TLSSocket } from 'node:tls';
import { abortStream, abortsThrough } from '../../../pkg/mux/abort.js';
import type { Logger } from '../../../pkg/log/logger.js';
import { writePattern } from './bytes.js';
import { errorMessage } from './errors.js';
import { parseStreamOptions } from './exec.js';
import { sendResponse, textResponse, writeRawResponse } from './http-response.js';
import { logBody, parseLogQuery, serveFollow, type FollowStreamRecord } from './logs.js';
import { resolveOptions, type ResolvedOptions, type StandinKubeletOptions } from './options.js';
import { PORT_FORWARD_PROTOCOLS, type PortForwardRecord } from './port-forward.js';
import { recordRequest, waitUntil, type RecordedRequest, type TLSClientErrorRecord } from './record.js';
import { route, type Route } from './routes.js';
import { SPDY_EXEC_PROTOCOLS } from './spdy-exec.js';
import { answerStreamUpgrade, type StreamRoute, type UpgradeContext } from './stream-upgrade.js';
import { decideUpgrade, goError, type UpgradeDecision } from './upgrade.js';

const MAX_PATTERN_BYTES = 2 ** 40;

/**
 * Events: 'request' (RecordedRequest), 'followEnded' (FollowStreamRecord),
 * 'portForward' (PortForwardRecord, when a pair starts relaying), 'close'.
 */
export class StandinKubelet extends EventEmitter {
  readonly requests: RecordedRequest[] = [];
  readonly followStreams: FollowStreamRecord[] = [];
  readonly portForwards: PortForwardRecord[] = [];
  /** Handshakes refused (no or untrusted client certificate, bad ALPN, garbage). */
  readonly tlsClientErrors: TLSClientErrorRecord[] = [];
  /** Malformed HTTP after a good handshake. */
  readonly httpClientErrors: TLSClientErrorRecord[] = [];
  /** TLS connections that completed the handshake. */
  connectionsAccepted = 0;

  private readonly server: Server;
  private readonly opts: ResolvedOptions;
  private readonly log: Logger;
  private readonly upgradeContext: UpgradeContext;
  /** Each open socket and a promise of its 'close'. */
  private readonly sockets = new Map<Socket, Promise<void>>();
  /** The TCP connections accepted and still open, by peer address and port, until their TLS session begins. */
  private readonly tcpByPeer = new Map<string, Socket>();
  private readonly sessions = new Set<{ destroy(): void }>();
  private readonly followStoppers = new Set<() => void>();
  private readonly connectionIds = new WeakMap<Duplex, number>();
  private boundPort: number | null = null;
  private boundAddress = '';
  private started = false;
  private closing: Promise<void> | null = null;

  constructor(opts: StandinKubeletOptions) {
    super();
    this.opts = resolveOptions(opts);
    this.log = this.opts.logger;
    this.upgradeContext = {
      opts: this.opts,
      hold: (session) => {
        this.sessions.add(session);
        session.once('close', () => this.sessions.delete(session));
      },
      track: (s) => this.track(s),
      recordPortForward: (rec) => {
        this.keep(this.portForwards, rec);
        this.emit('portForward', rec);
      },
    };
    const { cert, key, clientCA } = this.opts;
    this.server = createServer({ cert, key, ca: clientCA, requestCert: true, rejectUnauthorized: true, ALPNProtocols: ['http/1.1'] });
    this.server.keepAliveTimeout = 30_000;
    this.server.on('connection', (s: Socket) => {
      this.track(s);
      const peer = `${s.remoteAddress}|${s.remotePort}`;
      this.tcpByPeer.set(peer, s);
      s.once('close', () => this.tcpByPeer.delete(peer));
      s.on('error', (err) => this.log.verbose(2, 'connection error', { error: err.message }));
    });
    this.server.on('secureConnection', (s: TLSSocket) => {
      // resetConnections() resets the TCP connection beneath the session.
      const peer = `${s.remoteAddress}|${s.remotePort}`;
      const tcp = this.tcpByPeer.get(peer);
      if (tcp !== undefined) abortsThrough(s, tcp);
      this.tcpByPeer.delete(peer);
      this.connectionsAccepted++;
      this.connectionIds.set(s, this.connectionsAccepted);
      this.track(s);
    });
    this.server.on('tlsClientError', (err: NodeJS.ErrnoException) => {
      this.keep(this.tlsClientErrors, { at: performance.now(), code: err.code, message: err.message });
      this.log.verbose(2, 'TLS handshake refused', { error: err.message });
    });
    this.server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => this.onClientError(err, socket));
    this.server.on('request', (req: IncomingMessage, res: ServerResponse) => this.onRequest(req, res));
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket, head));
    this.server.on('error', (err: Error) => this.log.error('stand-in kubelet server error', { error: err.message }));
  }

  /** Listens; resolves once the port is bound. */
  async start(): Promise<void> {
    if (this.started) throw new Error('StandinKubelet.start() was already called');
    this.started = true;
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port, this.opts.host, () => {
        this.server.removeListener('error', reject);
        resolve();
      });
    });
    const a = this.server.address();
    if (a === null || typeof a === 'string') throw new Error('the stand-in kubelet has no TCP address after listen');
    this.boundPort = a.port;
    this.boundAddress = a.address;
    this.log.verbose(2, 'stand-in kubelet listening', { address: this.url });
  }

  get port(): number {
    if (this.boundPort === null) throw new Error('the stand-in kubelet is not listening: await start() first');
    return this.boundPort;
  }

  get address(): string {
    void this.port; // throws when not started
    return this.boundAddress;
  }

  /** https://127.0.0.1:<port> (IPv6 in brackets). */
  get url(): string {
    const host = this.address.includes(':') ? `[${this.address}]` : this.address;
    return `https://${host}:${this.port}`;
  }

  /** Follow streams that have ended (their timers stopped). */
  get followStreamsEnded(): number {
    return this.followStreams.filter((f) => f.endedAt !== null).length;
  }

  /** Sockets open right now: accepted ones (TCP and TLS) and port-forward dials. */
  get openSockets(): number {
    return this.sockets.size;
  }

  /** Resolves with the first n recorded requests once there are n. */
  waitForRequests(n: number, timeoutMs = 5000): Promise<RecordedRequest[]> {
    return waitUntil(this, 'request', () => (this.requests.length >= n ? this.requests.slice(0, n) : undefined), timeoutMs, `${n} requests`);
  }

  /** Resolves with the ended follow streams once n have ended. */
  waitForFollowEnded(n = 1, timeoutMs = 5000): Promise<FollowStreamRecord[]> {
    const ended = (): FollowStreamRecord[] | undefined => {
      const done = this.followStreams.filter((f) => f.endedAt !== null);
      return done.length >= n ? done : undefined;
    };
    return waitUntil(this, 'followEnded', ended, timeoutMs, `${n} ended follow streams`);
  }

  /**
   * Resets every connection it accepted, as a kubelet that crashed would
   * leave them: a TCP RST beneath each TLS session (no close_notify, no FIN).
   * Resolves once they are all closed.
   */
  async resetConnections(): Promise<void> {
    const open = [...this.sockets].filter(([s]) => !s.destroyed);
    const reset = new Error('the stand-in kubelet reset its connections');
    // TLS sessions first: each resets the TCP connection beneath it; then the TCP connections still without one.
    for (const [s] of open) if (s instanceof TLSSocket) abortStream(s, reset);
    for (const [s] of open) abortStream(s, reset);
    await Promise.all(open.map(([, gone]) => gone));
  }

  /** Stops listening and destroys every connection, session and timer. Idempotent. */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private async shutdown(): Promise<void> {
    const closed = this.started ? new Promise<void>((resolve) => this.server.close(() => resolve())) : Promise.resolve();
    for (const stop of [...this.followStoppers]) stop();
    for (const s of [...this.sessions]) s.destroy();
    const sockets = [...this.sockets];
    for (const [s] of sockets) s.destroy();
    this.server.closeAllConnections();
    // 'close' comes a tick after destroy(); wait so that nothing is left when we resolve.
    await Promise.all([closed, ...sockets.map(([, gone]) => gone)]);
    this.log.verbose(2, 'stand-in kubelet closed');
    this.emit('close');
  }

  private track(s: Socket): void {
    if (this.closing !== null) {
      s.destroy();
      return;
    }
    this.sockets.set(
      s,
      new Promise((resolve) =>
        s.once('close', () => {
          this.sockets.delete(s);
          resolve();
        }),
      ),
    );
  }

  private keep<T>(list: T[], item: T): void {
    if (list.length < this.opts.maxRecords) list.push(item);
  }

  private record(req: IncomingMessage, upgrade: boolean): RecordedRequest {
    const rec = recordRequest(req, this.connectionIds.get(req.socket) ?? 0, upgrade);
    this.keep(this.requests, rec);
    if (this.log.enabled(5)) this.log.verbose(5, 'request', { method: rec.method, target: rec.target, connection: rec.connection, upgrade });
    this.emit('request', rec);
    return rec;
  }

  private onClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
    this.keep(this.httpClientErrors, { at: performance.now(), code: err.code, message: err.message });
    this.log.verbose(2, 'malformed HTTP request', { error: err.message, code: err.code });
    if (!socket.writable || err.code === 'ECONNRESET') {
      socket.destroy();
      return;
    }
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
    writeRawResponse(socket, textResponse(status, `malformed HTTP request: ${err.code ?? err.message}\n`));
  }

  private routeOf(req: IncomingMessage): { route: Route; url: URL } {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'https://kubelet.invalid');
    } catch (err: unknown) {
      return {
        route: { kind: 'simple', response: textResponse(400, `malformed request target: ${errorMessage(err)}\n`) },
        url: new URL('https://kubelet.invalid/'),
      };
    }
    return { route: route(req.method ?? '', url.pathname, this.opts.nodeName), url };
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    try {
      const rec = this.record(req, false);
      const { route: r, url } = this.routeOf(req);
      switch (r.kind) {
        case 'simple':
          sendResponse(res, r.response);
          return;
        case 'bytes':
          this.serveBytes(req, res, url);
          return;
        case 'logs':
          this.serveLogs(res, url, rec);
          return;
        case 'stream':
        case 'portForward': {
          // Without Connection: Upgrade this can only end in an error answer.
          const d = this.decide(req, r, url);
          sendResponse(res, d.kind === 'respond' ? d.response : goError(400, 'unable to upgrade: missing upgrade headers in request'));
          return;
        }
        default: {
          const never: never = r;
          throw new Error(`unhandled route ${JSON.stringify(never)}`);
        }
      }
    } catch (err: unknown) {
      this.log.error('stand-in kubelet request failed', { error: errorMessage(err) });
      if (!res.headersSent) sendResponse(res, textResponse(500, `internal error: ${errorMessage(err)}\n`));
      else res.destroy();
    }
  }

  private decide(req: IncomingMessage, r: StreamRoute, url: URL): UpgradeDecision {
    if (r.kind === 'portForward') return decideUpgrade(req, [], PORT_FORWARD_PROTOCOLS);
    const opts = parseStreamOptions(url.searchParams, r.stream);
    if (typeof opts === 'string') return { kind: 'respond', response: goError(400, opts) };
    return decideUpgrade(req, this.opts.execWebSocketProtocols, SPDY_EXEC_PROTOCOLS);
  }

  private serveBytes(req: IncomingMessage, res: ServerResponse, url: URL): void {
    const text = url.searchParams.get('n') ?? '';
    const n = /^\d{1,13}$/.test(text) ? Number(text) : NaN;
    if (!(n <= MAX_PATTERN_BYTES)) {
      sendResponse(res, textResponse(400, `query n must be a whole number of bytes from 0 to 2^40, got ${JSON.stringify(text)}\n`));
      return;
    }
    res.writeHead(200, ['Content-Type', 'application/octet-stream', 'Content-Length', String(n)]);
    if (req.method === 'HEAD') res.end();
    else writePattern(res, n);
  }

  private serveLogs(res: ServerResponse, url: URL, rec: RecordedRequest): void {
    const q = parseLogQuery(url.searchParams);
    if ('status' in q) {
      sendResponse(res, q);
      return;
    }
    if (!q.follow) {
      sendResponse(res, { status: 200, headers: [['Content-Type', 'text/plain; charset=utf-8']], body: logBody(q) });
      return;
    }
    const record: FollowStreamRecord = {
      id: this.followStreams.length + 1,
      target: rec.target,
      connection: rec.connection,
      startedAt: performance.now(),
      lineTimes: [],
      linesWritten: 0,
      endedAt: null,
      endReason: null,
    };
    this.keep(this.followStreams, record);
    const stop = serveFollow(res, q, record, {
      intervalMs: this.opts.followIntervalMs,
      maxLines: this.opts.followMaxLines,
      onEnd: (r) => {
        this.followStoppers.delete(stop);
        this.log.verbose(2, 'follow stream ended', { target: r.target, reason: r.endReason, lines: r.linesWritten });
        this.emit('followEnded', r);
      },
    });
    if (record.endedAt === null) this.followStoppers.add(stop);
  }

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // node:http removed its own error handler when it handed the socket over.
    socket.on('error', (err: Error) => this.log.verbose(2, 'upgraded connection error', { error: err.message }));
    try {
      this.record(req, true);
      const { route: r, url } = this.routeOf(req);
      if (r.kind === 'simple') {
        writeRawResponse(socket, r.response);
        return;
      }
      if (r.kind !== 'stream' && r.kind !== 'portForward') {
        writeRawResponse(socket, goError(400, `${url.pathname} cannot be upgraded`));
        return;
      }
      answerStreamUpgrade(this.upgradeContext, socket, head, r, url.searchParams, this.decide(req, r, url));
    } catch (err: unknown) {
      this.log.error('stand-in kubelet upgrade failed', { error: errorMessage(err) });
      socket.destroy();
    }
  }
}
