// The HTTP CONNECT frontend ("proxier"): `CONNECT host:port HTTP/1.1`, with an
// optional X-Tunnel-Proxy-Host naming the node. The answer is written only
// once the agent has answered the dial: exactly `200 Connection Established`,
// or a complete 502/503/504 response naming the host and the cause.
// On the egress socket, what the tunnel does not reach may be dialled
// directly instead (direct-dial.ts), answered the same way.

import { createServer, type Server, type Socket } from 'node:net';
import type { Registry } from 'prom-client';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { CallerRefusals } from '../net/caller-refusals.js';
import { ConnectionSet } from '../net/connection-set.js';
import { stopListening } from '../net/listen.js';
import { asError, DialError, errorMessage } from '../protocol/errors.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import type { TunnelRelay } from '../tunnel/tunnel-relay.js';
import { answerAndClose, CONNECTION_ESTABLISHED, errorResponse, statusForDialFailure } from './http-answer.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import { dialFailureReason, type NodeNameOf } from './dial-reason.js';
import type { DirectDialer } from './direct-dial.js';
import { splice } from '../mux/splice.js';
import { headerValue, parseRequestHead, type RequestHead } from './request-head.js';
import { listenUnix, type OwnedSocketFile } from '../net/unix-listener.js';

export const PROXY_HOST_HEADER = 'x-tunnel-proxy-host';
/** Default time a client has to send its CONNECT head (kube-apiserver sends it at once). */
export const DEFAULT_CONNECT_HEAD_TIMEOUT_MS = 10_000;

export interface HttpConnectServerOptions {
  /** Unix socket path. */
  path: string;
  /** The flag that set `path`, named when the path cannot be had. */
  flag?: string;
  /** File mode of the socket. Default 0o660. */
  mode?: number;
  /** Largest request head accepted. Default 64 KiB. */
  maxHeadBytes?: number;
  /** How long a client may take to send its request head. Default DEFAULT_CONNECT_HEAD_TIMEOUT_MS. */
  headTimeoutMs?: number;
  /** The listener's name in yurttunnel_server_refused_callers_total. Default `proxier`. */
  name?: string;
  /** Where it counts the clients it closed before their request. */
  metricsRegistry?: Registry;
  /** The node an address belongs to, so that a failed dial's answer names it. */
  nodeNameOf?: NodeNameOf;
  /** The egress socket's direct dials (--egress-direct-dial); never the proxier's. */
  direct?: DirectDialer;
  logger?: Logger;
}

export class HttpConnectServer {
  private readonly server: Server;
  private readonly sockets = new ConnectionSet();
  private readonly log: Logger;
  private readonly maxHeadBytes: number;
  private readonly headTimeoutMs: number;
  private readonly limited: LogLimiter;
  /** Clients closed before their request, by why. */
  private readonly refusedCallers: CallerRefusals;
  private closing: Promise<void> | undefined;
  /** The socket file start() made. */
  private socketFile: OwnedSocketFile | undefined;

  constructor(
    private readonly tunnel: Tunnel,
    private readonly opts: HttpConnectServerOptions,
  ) {
    this.log = (opts.logger ?? silentLogger()).child({ component: 'http-connect' });
    this.maxHeadBytes = opts.maxHeadBytes ?? 64 * 1024;
    this.headTimeoutMs = opts.headTimeoutMs ?? DEFAULT_CONNECT_HEAD_TIMEOUT_MS;
    this.limited = new LogLimiter(this.log);
    this.refusedCallers = new CallerRefusals(opts.name ?? 'proxier', ['head_timeout'], opts.metricsRegistry);
    // Half-open: a client that finishes sending still gets the rest of the answer.
    this.server = createServer({ allowHalfOpen: true }, (socket) => this.onConnection(socket));
  }

  async start(): Promise<void> {
    this.socketFile = await listenUnix(this.server, this.opts.path, this.opts.mode ?? 0o660, {
      name: `${this.opts.name ?? 'proxier'} CONNECT socket`,
      flag: this.opts.flag,
      logger: this.log,
    });
    this.log.info('HTTP CONNECT proxier listening', { socket: this.opts.path });
  }

  /** Connections currently open (handshaking or tunnelled). */
  get connectionCount(): number {
    return this.sockets.size;
  }

  private readonly onClientSocketError = (err: Error): void => this.log.verbose(3, 'client socket error', { error: errorMessage(err) });

  private onConnection(socket: Socket): void {
    this.sockets.add(socket);
    // One listener for every socket: a closure made here would hold this call's context (the head
    // buffer, its timer, the handlers) for as long as the socket lives, which V8 may stretch (SocketRelay.detachFrom).
    socket.on('error', this.onClientSocketError);

    let buffered: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => {
      this.limited.warn('client sent no complete CONNECT request in time; closed', {
        socket: this.opts.path,
        timeoutMs: this.headTimeoutMs,
        closedSoFar: this.refusedCallers.add('head_timeout'),
      });
      stopReading();
      answerAndClose(socket, errorResponse(408, `no complete request head within ${this.headTimeoutMs} ms`));
    }, this.headTimeoutMs);
    timer.unref();
    /** The head is read: its listeners go (the socket keeps flowing, for serve()'s). */
    const headDone = (): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
    };
    const stopReading = (): void => {
      headDone();
      socket.pause();
    };
    const onEnd = (): void => {
      stopReading();
      socket.end();
    };
    const onData = (chunk: Buffer): void => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const result = parseRequestHead(buffered, this.maxHeadBytes);
      if (result.kind === 'incomplete') return;
      if (result.kind === 'error') {
        stopReading();
        this.limited.warn('bad CONNECT request', { status: result.status, error: result.message });
        answerAndClose(socket, errorResponse(result.status, result.message));
        return;
      }
      // Not paused: serve() reads on at once (a pause here and a resume there cost a tick and a stream flush before DIAL_REQ is written).
      headDone();
      // Bytes the client pipelined after the head belong to the tunnel.
      try {
        this.serve(socket, result.head, buffered.subarray(result.length));
      } catch (err: unknown) {
        this.internalError(socket, err);
      }
    };
    socket.on('data', onData);
    socket.on('end', onEnd);
  }

  private serve(socket: Socket, head: RequestHead, early: Buffer): void {
    if (head.method !== 'CONNECT') {
      this.limited.warn('not a CONNECT request', { method: head.method });
      answerAndClose(socket, errorResponse(405, `this proxy only supports CONNECT, not ${head.method}`, { Allow: 'CONNECT' }));
      return;
    }
    const target = head.target;
    const proxyHost = headerValue(head, PROXY_HOST_HEADER);

    // While the dial is pending keep reading, so that a client that gives up
    // is noticed; what it sends meanwhile is kept for the tunnel, up to a
    // bound, after which reading pauses. An EOF after bytes for the target is
    // a half-close (socat, `nc -N`, HTTP/1.0 scripts): the dial goes on, what
    // was sent is delivered, and the answer comes back. An EOF with nothing
    // sent is how a caller such as kube-apiserver abandons a dial (a close
    // and a half-close look the same on a socket): the dial is cancelled.
    const cancel = new AbortController();
    const pendingChunks: Buffer[] = early.length > 0 ? [early] : [];
    let pendingBytes = early.length;
    const onData = (chunk: Buffer): void => {
      pendingChunks.push(chunk);
      pendingBytes += chunk.length;
      if (pendingBytes >= this.maxHeadBytes) socket.pause();
    };
    const onEnd = (): void => {
      if (pendingBytes === 0) cancel.abort();
    };
    const onGone = (): void => cancel.abort();
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onGone);
    socket.resume();
    const unwatch = (): void => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onGone);
    };
    const stopWatching = (): void => {
      unwatch();
      socket.pause();
    };

    const failed = (err: Error): void => {
      try {
        this.answerFailedDial(socket, err, target, proxyHost, stopWatching, cancel.signal);
      } catch (thrown: unknown) {
        this.internalError(socket, thrown);
      }
    };
    // Runs once the agent's DIAL_RSP was handled: the 200 goes out before anything else is done.
    const connected = (conn: TunnelRelay): void => {
      // Not paused: the relay takes the socket's reads over in this same turn (a pause here and its resume in attach cost a tick and two events).
      unwatch();
      if (socket.destroyed || cancel.signal.aborted) {
        conn.destroy();
        socket.destroy();
        return;
      }
      try {
        socket.write(CONNECTION_ESTABLISHED);
        // What the client sent during the dial goes first; a client that
        // half-closed during the dial (its EOF read already) ends its direction.
        conn.attach(socket, pendingChunks);
      } catch (err: unknown) {
        // Not left in the agent's table, holding its target open; and never thrown into the tunnel's packet handling.
        conn.destroy(asError(err));
        this.internalError(socket, err);
      }
    };
    const direct = this.opts.direct;
    if (direct?.takes(target, proxyHost) === true) {
      direct.dial(target, cancel.signal, (conn) => this.joinDirect(socket, conn, pendingChunks, unwatch, cancel.signal), failed);
      return;
    }
    // Neither callback throws (each keeps its failures to this client), so nothing is left unhandled.
    this.tunnel.dial(target, { proxyHost, signal: cancel.signal, relay: true }).then(connected, failed);
  }

  /** A direct dial connected: 200, what the client sent meanwhile, then the two sockets joined. */
  private joinDirect(socket: Socket, conn: Socket, pendingChunks: Buffer[], unwatch: () => void, cancelled: AbortSignal): void {
    // Not paused: splice's pipes take the socket's reads over in this same turn.
    unwatch();
    if (socket.destroyed || cancelled.aborted) {
      conn.destroy();
      socket.destroy();
      return;
    }
    try {
      socket.write(CONNECTION_ESTABLISHED);
      for (const chunk of pendingChunks) conn.write(chunk);
      // A client that half-closed during the dial: pipe() passes its end on.
      splice(socket, conn);
    } catch (err: unknown) {
      conn.destroy();
      this.internalError(socket, err);
    }
  }

  /** The dial failed: the client gets a status naming the cause (unless it left meanwhile). */
  private answerFailedDial(socket: Socket, err: Error, target: string, proxyHost: string | undefined, stopWatching: () => void, cancelled: AbortSignal): void {
    stopWatching();
    if (socket.destroyed || cancelled.aborted) {
      socket.destroy();
      return;
    }
    const status = err instanceof DialError ? statusForDialFailure(err.code) : 502;
    const reason = dialFailureReason(err, removePortFromHost(proxyHost ?? target), this.opts.nodeNameOf);
    this.limited.warn('CONNECT failed', {
      dialAddress: target,
      proxyHost,
      status,
      reason: err instanceof DialError ? err.code : 'unknown',
      error: reason,
    });
    answerAndClose(socket, errorResponse(status, reason, {}, { reasonInStatusLine: true }));
  }

  /** The boundary of one client: whatever goes wrong serving it ends that client, logged with its stack. */
  private internalError(socket: Socket, err: unknown): void {
    this.log.error('internal error serving a CONNECT client; its connection was closed', {
      error: errorMessage(err),
      stack: err instanceof Error ? err.stack : undefined,
    });
    socket.destroy();
  }

  /** Why callers of the socket path no longer reach this server (readiness), or undefined. */
  socketProblem(): string | undefined {
    return this.socketFile?.problem();
  }

  /** Takes no new clients; open connections go on. */
  stopAccepting(): void {
    if (this.server.listening) this.server.close();
  }

  /** Stops listening and closes every client connection. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    if (this.closing === undefined) {
      this.limited.flush();
      this.closing = stopListening(this.server).then(() => this.socketFile?.release());
      this.sockets.destroyAll();
    }
    return this.closing;
  }
}
