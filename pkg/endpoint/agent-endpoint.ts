// The agent endpoint (`--tunnel-agent-connect-port`, 10262): gRPC's
// `AgentService/Connect` over HTTP/2 + mutual TLS, and on the same port the
// same link over a WebSocket (TLS ALPN `http/1.1`, an upgrade on any path:
// the transport that passes L7 load balancers). Each admitted call is handed
// to the tunnel as an AgentLink (agent-call.ts, ws-agent-call.ts) through one
// path, admission to serving; the tunnel never sees HTTP/2, WebSocket, TLS
// or a status code.
//
// We terminate HTTP/2 with node:http2 instead of @grpc/grpc-js's Server
// because grpc-js cannot raise the server's receive window, and bulk data
// (logs, metrics, copies) flows agent → server: a 64 KiB window halves the
// tunnel's throughput (shared/spec/environment.md). On the wire this is plain
// gRPC: Go and grpc-js agents see headers, length-prefixed messages, status
// trailers, keepalive pings and GOAWAY as from any gRPC server.

import { AsyncLocalStorage } from 'node:async_hooks';
import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import type { Server as TLSServer, TLSSocket } from 'node:tls';
import { guardStreamHandler } from '../grpc/error-boundary.js';
import { IncomingCall } from '../grpc/server-call-head.js';
import { GrpcStatus } from '../grpc/status.js';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { CallerRefusals, tlsRefusal } from '../net/caller-refusals.js';
import { ConnectionSet } from '../net/connection-set.js';
import { listen, stopListening } from '../net/listen.js';
import { errorMessage } from '../protocol/errors.js';
import { CONN_WINDOW_HEADER } from '../protocol/flow-control.js';
import { HALF_CLOSE_HEADER } from '../protocol/half-close.js';
import { RESUMED_HEADER, RESUME_HEADER, SESSION_HEADER } from '../protocol/resume.js';
import type { SessionOwner } from '../tunnel/session-table.js';
import type { AdmittedLink, Claim } from '../tunnel/sessions.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { Admission, type AgentCertificate, type AgentMetadata, type Refusal } from './admission.js';
import { carryAgentPackets, openAgentCall } from './agent-call.js';
import { AgentConnection, remoteOf } from './agent-connection.js';
import { agentServer, settingsOf, type AgentEndpointOptions, type AgentEndpointTLS, type Settings } from './agent-endpoint-settings.js';
import { AgentEndpointMetrics, type AgentRefusalReason } from './metrics.js';
import { within } from '../timers/sleep.js';
import { ClientCertificates, peerCertSubject } from './client-certificates.js';
import { isServedCall, type AnsweringHead, type Arrival, type LinkConnection, type ServedCall } from './served-call.js';
import { WsArrivals } from './ws-arrivals.js';
import { replaceLinksLeftBehind } from './links-left-behind.js';

/** Pings a connection carrying a resumable call may send this often without strikes: the agent's liveness check. */
const RESUME_MIN_PING_INTERVAL_MS = 1000;

/** How often, at most, the connect rate limit's summary line is logged. */
const RATE_LOG_INTERVAL_MS = 5000;

/** Who a call is, for the session table: its agentID and certificate, and whether the identity check tied them. */
function ownerOf(meta: AgentMetadata): SessionOwner {
  return { agentID: meta.agentID, fingerprint: meta.fingerprint, identityVerified: meta.identityVerified };
}

/** An accepted agent call: the tunnel's link over it (its backend, whether it resumed a session), and the call. */
interface AcceptedCall {
  admitted: AdmittedLink;
  link: ServedCall;
  /** The resume window offered, if the link is resumable. */
  windowMs: number | undefined;
}

export class AgentEndpoint {
  private readonly opts: Settings;
  private readonly log: Logger;
  /** The agent port: TLS, handing each connection by ALPN to `h2` or `http1`. */
  private readonly server: TLSServer;
  private readonly h2: http2.Http2Server;
  private readonly connections = new Map<Http2Session, AgentConnection>();
  /** The HTTP/1.1 connections (ALPN http/1.1, or none): agents' WebSocket upgrades. */
  private readonly ws: WsArrivals;
  /** The connection each admitted call rides on. */
  private readonly connectionOf = new WeakMap<ServedCall, LinkConnection>();
  private readonly sockets = new ConnectionSet();
  /**
   * The peer of the connection whose TLS handshake is under way: a TLS socket that is reset or times out
   * mid-handshake no longer knows its remoteAddress. Entered before Node wraps the raw socket in TLS, so its
   * handshake's callbacks (reads, the timeout) carry it to 'tlsClientError'.
   */
  private readonly handshakePeer = new AsyncLocalStorage<string>();
  private readonly metrics: AgentEndpointMetrics;
  private readonly refusedCallers: CallerRefusals;
  private readonly admission: Admission;
  private readonly limited: LogLimiter;
  private readonly certificates: ClientCertificates;
  private lastRateLog = 0;
  private closing: Promise<void> | undefined;
  private listening = false;

  constructor(
    private readonly tunnel: Tunnel,
    opts: AgentEndpointOptions,
  ) {
    this.opts = settingsOf(opts);
    if (!Number.isInteger(this.opts.maxStreamsPerAgent) || this.opts.maxStreamsPerAgent < 1) {
      throw new TypeError(`maxStreamsPerAgent must be a positive integer, got ${this.opts.maxStreamsPerAgent}`);
    }
    if (!Number.isInteger(this.opts.serverCount) || this.opts.serverCount < 1) {
      throw new TypeError(`serverCount must be a positive integer, got ${this.opts.serverCount}`);
    }
    this.log = (opts.logger ?? silentLogger()).child({ component: 'agent-endpoint' });
    this.limited = new LogLimiter(this.log);
    this.certificates = new ClientCertificates(this.opts.forwardedClientCertHeader, this.opts.trustedProxyCIDRs, opts.tls.ca);
    this.metrics = new AgentEndpointMetrics(opts.metricsRegistry);
    this.refusedCallers = new CallerRefusals('agent', ['tls_handshake_timeout', 'tls_error'], opts.metricsRegistry);
    this.admission = new Admission({
      maxStreamsPerAgent: this.opts.maxStreamsPerAgent,
      maxConnectRate: this.opts.maxConnectRate,
      identityCheck: this.opts.identityCheck,
      metrics: this.metrics,
      log: this.limited,
    });
    ({ tlsServer: this.server, h2: this.h2 } = agentServer(opts.tls, this.opts));
    this.server.prependListener('connection', (socket: Socket) => this.handshakePeer.enterWith(remoteOf(socket)));
    this.server.on('connection', (socket: Socket) => {
      // Control packets are small and latency-bound; Nagle would hold them back.
      socket.setNoDelay(true);
      this.sockets.add(socket);
    });
    this.server.on('tlsClientError', (err: Error, socket: TLSSocket) => this.onTLSError(err, socket));
    this.server.on('secureConnection', (socket: TLSSocket) => this.onSecureConnection(socket));
    this.h2.on('session', (session) => this.onSession(session));
    this.h2.on(
      'stream',
      guardStreamHandler(this.log, (stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) =>
        this.onStream(stream, headers, rawHeaders),
      ),
    );
    this.ws = new WsArrivals({
      opts: this.opts,
      log: this.log,
      limited: this.limited,
      tunnel,
      metrics: this.metrics,
      remoteAddressOf: (socket) => remoteOf(socket),
      arrive: (arrival) => this.arrive(arrival),
    });
  }

  /** h2 is gRPC; http/1.1, or no ALPN (load balancers speaking TLS to their backends seldom offer any), the WebSocket transport. */
  private onSecureConnection(socket: TLSSocket): void {
    if (!socket.authorized && !this.certificates.trusts(socket)) {
      // Only with trusted proxies does TLS let such a connection finish its handshake: refused here as TLS refuses it otherwise.
      const remoteAddress = remoteOf(socket);
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when no certificate came, whatever @types/node says
      const error = String(socket.authorizationError ?? 'no client certificate');
      this.limited.warn('agent TLS handshake failed; connection refused', { remoteAddress, error, refusedSoFar: this.refusedCallers.add('tls_error') });
      socket.destroy();
      return;
    }
    if (socket.alpnProtocol === 'h2') this.h2.emit('connection', socket);
    else this.ws.take(socket);
  }

  /**
   * Serves a new certificate (and client CA) from the next TLS handshake on;
   * established agent connections keep theirs.
   */
  setTLS(tls: AgentEndpointTLS): void {
    this.server.setSecureContext({ cert: tls.cert, key: tls.key, ca: tls.ca, minVersion: 'TLSv1.2' });
    this.certificates.setCA(tls.ca);
    this.log.info('serving certificate replaced for new agent connections');
  }

  async start(): Promise<void> {
    await listen(this.server, { port: this.opts.port, host: this.opts.host }, { name: 'agent port', logger: this.log, flag: '--tunnel-agent-connect-port' });
    this.listening = true;
    const a = this.address;
    this.log.info('listening for agents', { address: `${a.address}:${a.port}`, serverID: this.opts.serverID });
  }

  get address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  /** Calls and packets refused by a limit so far, by reason (as yurttunnel_server_agent_refusals_total counts them). */
  get refusals(): Readonly<Record<AgentRefusalReason, number>> {
    return this.metrics.refusedSoFar;
  }

  /** Connections open on the agent port, handshaking ones included. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  private onTLSError(err: Error, socket: TLSSocket): void {
    const remoteAddress = this.handshakePeer.getStore() ?? remoteOf(socket);
    const refusal = tlsRefusal(err, socket);
    const soFar = this.refusedCallers.add(refusal.reason);
    if (refusal.reason === 'tls_handshake_timeout') {
      this.limited.warn('agent connection did not finish its TLS handshake in time; closed', {
        remoteAddress,
        timeoutMs: this.opts.tlsHandshakeTimeoutMs,
        closedSoFar: soFar,
      });
    } else {
      this.limited.warn('agent TLS handshake failed; connection refused', { remoteAddress, error: refusal.error, refusedSoFar: soFar });
    }
    socket.destroy();
  }

  private onSession(session: Http2Session): void {
    const connection = new AgentConnection(session, {
      keepaliveTimeMs: this.opts.keepaliveTimeMs,
      keepaliveTimeoutMs: this.opts.keepaliveTimeoutMs,
      minPingIntervalMs: this.opts.minPingIntervalMs,
      connectionWindowSize: this.opts.connectionWindowSize,
      log: this.limited,
    });
    this.connections.set(session, connection);
    session.once('close', () => this.connections.delete(session));
  }

  private refuse(call: AnsweringHead, refusal: Refusal, connection: LinkConnection | undefined): void {
    if (refusal.by === 'connect_rate') {
      // A reconnect storm refuses hundreds at once: one summary line every few seconds, not one each.
      const now = Date.now();
      if (now - this.lastRateLog >= RATE_LOG_INTERVAL_MS) {
        this.lastRateLog = now;
        this.log.warn('agents refused by the connect rate limit; they retry after a backoff', {
          refusedSoFar: this.admission.connectRateRefusals,
          limitPerSecond: this.admission.connectRateLimit,
        });
      }
    } else {
      this.limited.warn('agent call rejected', { remoteAddress: connection?.remoteAddress ?? 'unknown', grpcStatus: refusal.code, error: refusal.message });
    }
    if (call.refuse(refusal)) connection?.pings?.headersSent();
  }

  private onStream(stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, rawHeaders: string[]): void {
    const session = stream.session;
    const connection = session === undefined ? undefined : this.connections.get(session);
    const remoteAddress = connection?.remoteAddress ?? 'unknown';
    connection?.opened(stream.id);
    stream.on('error', (err) => {
      this.log.verbose(2, 'agent stream error', { remoteAddress, error: errorMessage(err) });
    });
    const call = new IncomingCall(stream, headers, rawHeaders);
    const tracker = connection?.pings;
    this.arrive({
      head: call,
      socket: session?.socket as TLSSocket | undefined,
      connection,
      remoteAddress,
      open: (logger) =>
        openAgentCall(stream, this.tunnel, {
          maxMessageSize: this.opts.maxMessageSize,
          writeTracker: tracker,
          controlBufferLimit: this.opts.controlBufferLimit,
          onControlRefused: () => this.metrics.refused('unread_control'),
          logger,
        }),
      accept: (_link, metadata) => {
        call.accept(metadata);
        tracker?.headersSent();
      },
    });
  }

  /** A call on either transport: admission, session claims, the answer, then its packets into the tunnel. */
  private arrive(arrival: Arrival): void {
    const { head: call, connection, remoteAddress } = arrival;
    const peer = this.certificates.of(arrival);
    if ('code' in peer) {
      this.refuse(call, peer, connection);
      return;
    }
    let claim: Claim | undefined;
    const meta = this.admission.admit(call, peer.cert, this.closing !== undefined, (m) => {
      if (this.resumeWindowFor(m) === undefined || m.claims.length === 0) return false;
      claim = this.tunnel.sessions.claim(m.claims, ownerOf(m));
      return claim.found !== undefined;
    });
    if ('code' in meta) {
      this.refuse(call, meta, connection);
      return;
    }
    const stale = claim === undefined ? undefined : this.tunnel.sessions.refusal(claim, meta.agentID, remoteAddress);
    if (stale !== undefined) {
      this.refuse(call, { code: GrpcStatus.UNAVAILABLE, message: stale, by: 'call' }, connection);
      return;
    }
    this.serveCall(this.acceptCall(arrival, meta, claim, peer.cert), meta, connection);
  }

  /**
   * Answers an admitted call and hands it to the tunnel's sessions, which
   * resume the session its claim found or open a new link (resumable when
   * the agent asked and we offer it); here only the answer's headers are made.
   */
  private acceptCall(arrival: Arrival, meta: AgentMetadata, claim: Claim | undefined, cert: AgentCertificate | undefined): AcceptedCall {
    const { connection, remoteAddress } = arrival;
    // Flow control only when the agent announced its window and we offer one.
    const flow =
      meta.agentWindow !== undefined && this.opts.connWindow > 0
        ? { sendWindow: meta.agentWindow, receiveWindow: this.opts.connWindow, roundTripMs: () => connection?.minRoundTripMs }
        : undefined;
    // Headers go out at once, before any packet: agents block reading them.
    const responseMetadata: Record<string, string> = { serverid: this.opts.serverID, servercount: String(this.opts.serverCount) };
    if (flow !== undefined) responseMetadata[CONN_WINDOW_HEADER] = String(flow.receiveWindow);
    const halfClose = meta.halfClose && this.opts.halfClose;
    if (halfClose) responseMetadata[HALF_CLOSE_HEADER] = '1';
    const link = arrival.open(this.log.child({ agentID: meta.agentID }));
    const windowMs = this.resumeWindowFor(meta);
    const roundTripMs = (): number | undefined => connection?.roundTripMs;
    const info = {
      agentID: meta.agentID,
      identifiers: meta.identifiers,
      certSubject: peerCertSubject(cert),
      flow,
      halfClose,
      probe: meta.probe,
      remoteAddress,
      roundTripMs,
    };
    const admitted = this.tunnel.sessions.admit({
      link,
      info,
      owner: ownerOf(meta),
      windowMs,
      claim,
      answer: (session, superseded) => {
        // A resume may arrive over the other transport: whichever link it supersedes, that one goes.
        if (isServedCall(superseded)) superseded.abort('superseded by a resume of its session (the agent came back on a new call)');
        if (session !== undefined) {
          responseMetadata[RESUME_HEADER] = String(session.windowMs);
          responseMetadata[SESSION_HEADER] = session.token;
          if (session.received !== undefined) responseMetadata[RESUMED_HEADER] = String(session.received);
        }
        arrival.accept(link, responseMetadata);
      },
    });
    return { admitted, link, windowMs };
  }

  /** Carries an accepted call's packets into the tunnel until the call ends. */
  private serveCall({ admitted, link, windowMs }: AcceptedCall, meta: AgentMetadata, connection: LinkConnection | undefined): void {
    const backend = admitted.backend;
    if (backend.closed) return;
    if (connection === undefined) {
      // The connection went away while we answered: one removal path, the tunnel's.
      admitted.ended({ kind: 'failed', message: 'connection closed before the call was served' });
      return;
    }
    // A probe comes only from an agent holding a link to every server it knows (protocol/probe.ts), and a link that
    // claims sessions (to resume one on another replica, reached through a balancer) from an agent that holds them:
    // either is a live process, whose session here may have dropped without it noticing yet (a reset it reads late
    // under load). It will resume that session. Only a link with neither is a new process.
    if (!admitted.resumed && !meta.probe && meta.claims.length === 0)
      replaceLinksLeftBehind({ tunnel: this.tunnel, connectionOf: this.connectionOf, limited: this.limited }, backend, ownerOf(meta));
    // The agent's liveness pings on a resumable link must not be strikes.
    if (windowMs !== undefined && connection.pings !== undefined)
      connection.pings.minTimeMs = Math.min(connection.pings.minTimeMs, RESUME_MIN_PING_INTERVAL_MS);
    // The agent's packets go into the tunnel until the call ends.
    this.admission.hold(meta.identityKeys);
    connection.calls.add(link);
    this.connectionOf.set(link, connection);
    carryAgentPackets(admitted, link, () => {
      connection.calls.delete(link);
      this.admission.release(meta.identityKeys);
    });
  }

  /**
   * The resume window of a call, when both ends announced resume and the
   * call has flow control and half-close (acknowledgements ride on
   * WINDOW_UPDATE); undefined otherwise.
   */
  private resumeWindowFor(meta: AgentMetadata): number | undefined {
    if (!(this.opts.resumeWindowMs > 0) || meta.resumeWindowMs === undefined) return undefined;
    if (meta.agentWindow === undefined || !(this.opts.connWindow > 0) || !meta.halfClose || !this.opts.halfClose) return undefined;
    return Math.min(meta.resumeWindowMs, this.opts.resumeWindowMs);
  }

  /** Takes no new agent connections; those already up keep their streams. */
  stopAccepting(): void {
    if (this.listening && this.server.listening) this.server.close();
  }

  /**
   * Stops accepting agents, ends every agent call with UNAVAILABLE and closes
   * every connection (after `graceMs` for them to go by themselves).
   * Idempotent: a second call waits for the first.
   */
  close(graceMs = 1000): Promise<void> {
    this.closing ??= this.doClose(graceMs);
    return this.closing;
  }

  private async doClose(graceMs: number): Promise<void> {
    const closed = this.listening ? stopListening(this.server) : Promise.resolve();
    const end = { kind: 'shutdown', message: 'yurt-tunnel-server is shutting down' } as const;
    for (const connection of [...this.connections.values(), ...this.ws.connections]) {
      for (const call of connection.calls) call.endFor(end, GrpcStatus.UNAVAILABLE);
      connection.calls.clear();
    }
    const sessions = [...this.connections.keys()];
    for (const session of sessions) session.close();
    if (sessions.length > 0) {
      const allClosed = Promise.all(sessions.map((s) => new Promise((r) => s.once('close', r))));
      await within(allClosed, graceMs);
    }
    for (const session of this.connections.keys()) session.destroy();
    this.ws.close();
    this.sockets.destroyAll();
    await closed;
    this.limited.flush();
    this.log.verbose(2, 'agent endpoint closed');
  }
}
