// The GRPC egress frontend: `ProxyService/Proxy` over a Unix socket, what
// kube-apiserver's EgressSelectorConfiguration (proxyProtocol GRPC,
// transport.uds) dials. Each accepted socket passes through the authority
// filter (kube-apiserver's `:authority` is the socket path) into an HTTP/2
// server that is never bound to a port itself.

import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import { createServer, type Server, type Socket } from 'node:net';
import type { Registry } from 'prom-client';
import { withAuthorityRewrite, type AuthorityFilterLimits } from '../grpc/authority-filter.js';
import { IncomingCall } from '../grpc/server-call-head.js';
import { ServerPacketCall } from '../grpc/server-call.js';
import { PROXY_PATH } from '../grpc/services.js';
import { LogLimiter } from '../log/log-limiter.js';
import { silentLogger, type Logger } from '../log/logger.js';
import { CallerRefusals } from '../net/caller-refusals.js';
import { ConnectionSet } from '../net/connection-set.js';
import { stopListening } from '../net/listen.js';
import { asError, errorMessage } from '../protocol/errors.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import type { DirectDialer } from './direct-dial.js';
import { EgressStream } from './grpc-proxy-stream.js';
import { DEFAULT_CONNECT_HEAD_TIMEOUT_MS } from './http-connect.js';
import { listenUnix, type OwnedSocketFile } from '../net/unix-listener.js';

/** What the HTTP/2 server announces (node:http2's defaults, spelled out): the authority filter in front enforces the same. */
const HTTP2_LIMITS: Required<AuthorityFilterLimits> = { maxFrameSize: 16_384, maxHeaderListSize: 65_535 };

export interface GrpcProxyServerOptions {
  path: string;
  /** The flag that set `path`, named when the path cannot be had. */
  flag?: string;
  /** File mode of the socket. Default 0o660. */
  mode?: number;
  nodeNameOf?: (host: string) => string | undefined;
  /** Dials what the tunnel does not reach (--egress-direct-dial). */
  direct?: DirectDialer;
  /** See EgressStreamOptions.dialRequestTimeoutMs. */
  dialRequestTimeoutMs?: number;
  /**
   * How long a client may take from connecting to opening its first call
   * (the HTTP/2 preface and the call's headers). Default DEFAULT_CONNECT_HEAD_TIMEOUT_MS.
   */
  headTimeoutMs?: number;
  logger?: Logger;
  /** Where it counts the clients it closed before their first call (as listener `egress`). */
  metricsRegistry?: Registry;
}

export class GrpcProxyServer {
  private readonly server: Server;
  private readonly http2: http2.Http2Server;
  private readonly sockets = new ConnectionSet();
  private readonly sessions = new ConnectionSet<Http2Session>();
  private readonly log: Logger;
  private readonly limited: LogLimiter;
  private readonly headTimeoutMs: number;
  /** Clients closed before their first call, by why. */
  private readonly refusedCallers: CallerRefusals;
  private closing: Promise<void> | undefined;
  /** The socket file start() made. */
  private socketFile: OwnedSocketFile | undefined;

  constructor(
    private readonly tunnel: Tunnel,
    private readonly opts: GrpcProxyServerOptions,
  ) {
    this.log = (opts.logger ?? silentLogger()).child({ component: 'egress-grpc' });
    this.limited = new LogLimiter(this.log);
    this.headTimeoutMs = opts.headTimeoutMs ?? DEFAULT_CONNECT_HEAD_TIMEOUT_MS;
    this.refusedCallers = new CallerRefusals('egress', ['head_timeout'], opts.metricsRegistry);
    this.http2 = http2.createServer({ maxSessionMemory: 64, settings: HTTP2_LIMITS });
    this.http2.on('session', (session: Http2Session) => {
      this.sessions.add(session);
      // The session exists from the moment the client connects: it has a bounded time to open a call.
      const headTimer = setTimeout(() => this.headTimedOut(session), this.headTimeoutMs);
      headTimer.unref();
      session.once('stream', () => clearTimeout(headTimer));
      session.once('close', () => clearTimeout(headTimer));
      session.on('error', (err: Error) => this.log.verbose(2, 'egress HTTP/2 session error', { error: errorMessage(err) }));
    });
    this.http2.on('stream', (stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) => {
      try {
        this.onStream(stream, headers, rawHeaders);
      } catch (err: unknown) {
        this.log.error('internal error serving an egress stream; it was reset', { error: errorMessage(err), stack: asError(err).stack });
        stream.destroy();
      }
    });
    this.server = createServer((socket) => this.onConnection(socket));
  }

  async start(): Promise<void> {
    this.socketFile = await listenUnix(this.server, this.opts.path, this.opts.mode ?? 0o660, {
      name: 'egress gRPC socket',
      flag: this.opts.flag,
      logger: this.log,
    });
    this.log.info('GRPC egress frontend listening', { path: this.opts.path });
  }

  /** Client connections open now. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  private headTimedOut(session: Http2Session): void {
    this.limited.warn('egress client opened no call in time; closed', {
      socket: this.opts.path,
      timeoutMs: this.headTimeoutMs,
      closedSoFar: this.refusedCallers.add('head_timeout'),
    });
    session.destroy();
  }

  private onConnection(socket: Socket): void {
    this.sockets.add(socket);
    const filtered = withAuthorityRewrite(socket, HTTP2_LIMITS, (err) =>
      this.limited.warn('egress client sent HTTP/2 frames we refuse; sent GOAWAY and closed', { socket: this.opts.path, error: err.message }),
    );
    this.http2.emit('connection', filtered);
  }

  private onStream(stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, rawHeaders: string[]): void {
    stream.on('error', () => {
      // The call reports its end through 'close'.
    });
    const call = new IncomingCall(stream, headers, rawHeaders);
    const refusal = call.check([PROXY_PATH]);
    if (refusal !== undefined) {
      this.limited.warn('egress call refused', { path: call.path, error: refusal.message });
      call.refuse(refusal);
      return;
    }
    call.accept({});
    new EgressStream(new ServerPacketCall(stream, { logger: this.log }), {
      tunnel: this.tunnel,
      nodeNameOf: this.opts.nodeNameOf,
      direct: this.opts.direct,
      dialRequestTimeoutMs: this.opts.dialRequestTimeoutMs,
      logger: this.log,
    }).start();
  }

  /** Why callers of the socket path no longer reach this server (readiness), or undefined. */
  socketProblem(): string | undefined {
    return this.socketFile?.problem();
  }

  /** Takes no new clients; open streams go on. */
  stopAccepting(): void {
    if (this.server.listening) this.server.close();
  }

  /** Stops listening and closes every client connection. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.limited.flush();
      this.closing = stopListening(this.server).then(() => this.socketFile?.release());
      this.sessions.destroyAll();
      this.sockets.destroyAll();
    }
    return this.closing;
  }
}
