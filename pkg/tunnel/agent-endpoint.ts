// The agent endpoint (`--tunnel-agent-connect-port`, 10262): gRPC's
// `AgentService/Connect` over HTTP/2 + mutual TLS.
//
// We terminate HTTP/2 with node:http2 instead of @grpc/grpc-js's Server
// because grpc-js cannot raise the server's receive window, and bulk data
// (logs, metrics, copies) flows agent → server: a 64 KiB window halves the
// tunnel's throughput (shared/spec/environment.md). On the wire this is plain
// gRPC: Go and grpc-js agents see headers, length-prefixed messages, status
// trailers, keepalive pings and GOAWAY as from any gRPC server.

import http2, { type Http2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { errorMessage } from '../protocol/errors.js';
import { CONN_WINDOW_HEADER, DEFAULT_CONN_WINDOW, parseConnWindow } from '../protocol/flow-control.js';
import { HALF_CLOSE_HEADER, announcesHalfClose } from '../protocol/half-close.js';
import { parseAgentIdentifiers, type AgentIdentifiers } from '../protocol/identifiers.js';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { PingPolicy, TOO_MANY_PINGS } from '../grpc/ping-policy.js';
import { guardStreamHandler } from '../grpc/error-boundary.js';
import { Keepalive } from '../grpc/keepalive.js';
import { ConnectRate } from './connect-rate.js';
import { IncomingCall, type CallRefusal } from '../grpc/server-call-head.js';
import { ServerPacketCall } from '../grpc/server-call.js';
import { AGENT_CONNECT_PATH } from '../grpc/services.js';
import { GrpcStatus } from '../grpc/status.js';
import { checkAgentIdentity, type AgentIdentityCheck } from './agent-identity.js';
import type { Backend } from './backend.js';
import type { Tunnel } from './tunnel.js';

/** New agent streams admitted per second by default (a restart of 1000 agents takes ~10 s to settle). */
export const DEFAULT_MAX_CONNECT_RATE = 100;
/** Default time a connection has to finish its TLS handshake. */
export const DEFAULT_AGENT_TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

export interface AgentEndpointTLS {
  cert: string;
  key: string;
  /** CA bundle that signs agent client certificates. */
  ca: string;
}

export interface AgentEndpointOptions {
  host?: string;
  /** 0 picks a free port. Default 10262. */
  port?: number;
  tls: AgentEndpointTLS;
  serverID: string;
  /** Announced to agents in the `servercount` header. Default 1. */
  serverCount?: number;
  /** Interval of our keepalive pings. Default 10 s. */
  keepaliveTimeMs?: number;
  /** How long a ping may go unanswered before the connection is dropped. Default 20 s. */
  keepaliveTimeoutMs?: number;
  /** Pings more frequent than this are strikes (Go's EnforcementPolicy.MinTime). Default 30 s. */
  minPingIntervalMs?: number;
  /** HTTP/2 receive window per stream. Default 4 MiB. */
  streamWindowSize?: number;
  /** HTTP/2 receive window per connection. Default 16 MiB. */
  connectionWindowSize?: number;
  /** Largest gRPC message accepted from an agent. Default 4 MiB. */
  maxMessageSize?: number;
  /**
   * Receive window per connection offered to agents that announce flow
   * control (proto/yurttunnel_ext.proto); 0 turns the extension off.
   * Default 1 MiB.
   */
  connWindow?: number;
  /**
   * Concurrent Connect calls one agent may hold, counted both by its client
   * certificate and by its agentID; more are refused with RESOURCE_EXHAUSTED.
   * Default 4 (an agent needs one per server replica it reaches through this one address).
   */
  maxStreamsPerAgent?: number;
  /** New Connect calls admitted per second (a token bucket with a burst of twice that); 0 admits all. Default 100. */
  maxConnectRate?: number;
  /** Bytes of control packets that may wait unwritten on one agent call before it is cut off. Default 1 MiB. */
  controlBufferLimit?: number;
  /** What an agent's client certificate must name (agent-identity.ts). Default `strict`. */
  identityCheck?: AgentIdentityCheck;
  /** Offer half-close (CLOSE_WRITE) to agents that announce it. Default true. */
  halfClose?: boolean;
  /** How long a connection may take to finish its TLS handshake before it is closed. Default 10 s. */
  tlsHandshakeTimeoutMs?: number;
  logger?: Logger;
}

export const DEFAULT_MAX_STREAMS_PER_AGENT = 4;

/** HTTP/2 streams one agent connection may open at once (refused calls count until answered). */
const MAX_CONCURRENT_STREAMS = 16;

/** After GOAWAY too_many_pings, how long the streams in flight get to finish before the connection is destroyed. */
const TOO_MANY_PINGS_GRACE_MS = 1000;

interface SessionState {
  keepalive?: Keepalive;
  /** grpc-go's ping enforcement, fed by our writes on this connection. */
  pings: PingPolicy;
  closeTimer?: NodeJS.Timeout;
  /** Highest stream the agent opened: GOAWAY names it so the calls in flight still finish. */
  lastStreamID: number;
  remoteAddress: string;
}

/** What an agent's call says about it. */
interface AgentMetadata {
  agentID: string;
  identifiers: AgentIdentifiers;
  agentWindow: number | undefined;
  /** What the per-agent stream limit counts this call under. */
  identityKeys: string[];
  /** The agent announced half-close. */
  halfClose: boolean;
}

/** "CN=edge-1; DNS:edge-1" from the client certificate, for logs. */
function peerCertSubject(session: Http2Session | undefined): string {
  const cert = (session?.socket as TLSSocket | undefined)?.getPeerCertificate();
  if (!cert?.subject) return '';
  return `CN=${String(cert.subject.CN ?? '')}${cert.subjectaltname ? `; ${cert.subjectaltname}` : ''}`;
}

function remoteOf(socket: Socket | TLSSocket | undefined): string {
  if (socket === undefined) return 'unknown';
  const { remoteAddress: a, remotePort: p } = socket;
  if (a === undefined) return 'unknown';
  return a.includes(':') ? `[${a}]:${p}` : `${a}:${p}`;
}

/** The raw socket under a server-side TLS socket (Node keeps it in `_parent`). */
function tlsParent(socket: TLSSocket): object {
  return (socket as unknown as { _parent?: object })._parent ?? socket;
}

export class AgentEndpoint {
  private readonly opts: Required<Omit<AgentEndpointOptions, 'host' | 'logger'>> & { host: string };
  private readonly log: Logger;
  private readonly server: http2.Http2SecureServer;
  private readonly sessions = new Map<Http2Session, SessionState>();
  private readonly sockets = new Set<Socket>();
  /** Peer address of each raw connection, still known after its TLS socket is gone. */
  private readonly remoteAddresses = new WeakMap<object, string>();
  /** Live agent calls, by the connection they ride on. */
  private readonly streams = new Map<Http2Session, Set<ServerPacketCall>>();
  /** Open Connect calls by agent identity: "cert:<sha256 fingerprint>" and "id:<agentID>". */
  private readonly streamsByIdentity = new Map<string, number>();
  /** Calls refused because their agent already held `maxStreamsPerAgent` (for metrics). */
  refusedForStreamLimit = 0;
  /** Control packets refused because an agent did not read its call (for metrics). */
  refusedControlPackets = 0;
  /** Calls refused by the connect rate limit (for metrics). */
  refusedForConnectRate = 0;
  /** Connections closed before their TLS handshake finished, by why (for metrics). */
  readonly refusedCallers = { tls_handshake_timeout: 0, tls_error: 0 };
  private readonly limited: LogLimiter;
  private readonly connectRate: ConnectRate | undefined;
  private lastRateLog = 0;
  private closing: Promise<void> | undefined;
  private listening = false;

  constructor(
    private readonly tunnel: Tunnel,
    opts: AgentEndpointOptions,
  ) {
    this.opts = {
      host: opts.host ?? '0.0.0.0',
      port: opts.port ?? 10262,
      tls: opts.tls,
      serverID: opts.serverID,
      serverCount: opts.serverCount ?? 1,
      keepaliveTimeMs: opts.keepaliveTimeMs ?? 10_000,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs ?? 20_000,
      minPingIntervalMs: opts.minPingIntervalMs ?? 30_000,
      streamWindowSize: opts.streamWindowSize ?? 4 * 1024 * 1024,
      connectionWindowSize: opts.connectionWindowSize ?? 16 * 1024 * 1024,
      maxMessageSize: opts.maxMessageSize ?? 4 * 1024 * 1024,
      connWindow: opts.connWindow ?? DEFAULT_CONN_WINDOW,
      maxStreamsPerAgent: opts.maxStreamsPerAgent ?? DEFAULT_MAX_STREAMS_PER_AGENT,
      identityCheck: opts.identityCheck ?? 'strict',
      halfClose: opts.halfClose ?? true,
      controlBufferLimit: opts.controlBufferLimit ?? 1024 * 1024,
      maxConnectRate: opts.maxConnectRate ?? DEFAULT_MAX_CONNECT_RATE,
      tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs ?? DEFAULT_AGENT_TLS_HANDSHAKE_TIMEOUT_MS,
    };
    if (!Number.isInteger(this.opts.maxStreamsPerAgent) || this.opts.maxStreamsPerAgent < 1) {
      throw new TypeError(`maxStreamsPerAgent must be a positive integer, got ${this.opts.maxStreamsPerAgent}`);
    }
    if (!Number.isInteger(this.opts.serverCount) || this.opts.serverCount < 1) {
      throw new TypeError(`serverCount must be a positive integer, got ${this.opts.serverCount}`);
    }
    this.log = (opts.logger ?? silentLogger()).child({ component: 'agent-endpoint' });
    this.limited = new LogLimiter(this.log);
    const rate = this.opts.maxConnectRate;
    this.connectRate = rate > 0 ? new ConnectRate(rate, 2 * rate) : undefined;
    this.server = http2.createSecureServer({
      cert: opts.tls.cert,
      key: opts.tls.key,
      ca: opts.tls.ca,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: 'TLSv1.2',
      ALPNProtocols: ['h2'],
      allowHTTP1: false,
      handshakeTimeout: this.opts.tlsHandshakeTimeoutMs,
      maxSessionMemory: 64,
      settings: {
        initialWindowSize: this.opts.streamWindowSize,
        maxConcurrentStreams: Math.max(MAX_CONCURRENT_STREAMS, this.opts.maxStreamsPerAgent),
      },
    });
    this.server.on('connection', (socket: Socket) => {
      // Control packets are small and latency-bound; Nagle would hold them back.
      socket.setNoDelay(true);
      this.remoteAddresses.set(socket, remoteOf(socket));
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    this.server.on('tlsClientError', (err: Error, socket: TLSSocket) => {
      // Node destroys a socket whose client certificate fails verification and
      // reports only "socket hang up"; the verification result is kept here.
      const remoteAddress = this.remoteAddresses.get(tlsParent(socket)) ?? remoteOf(socket);
      if ((err as { code?: unknown }).code === 'ERR_TLS_HANDSHAKE_TIMEOUT') {
        this.refusedCallers.tls_handshake_timeout++;
        this.limited.warn('agent connection did not finish its TLS handshake in time; closed', {
          remoteAddress,
          timeoutMs: this.opts.tlsHandshakeTimeoutMs,
          closedSoFar: this.refusedCallers.tls_handshake_timeout,
        });
      } else {
        this.refusedCallers.tls_error++;
        const why = socket.authorizationError;
        this.limited.warn('agent TLS handshake failed; connection refused', {
          remoteAddress,
          // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- null or undefined when the certificate passed, whatever @types/node says
          error: why !== undefined && why !== null ? `client certificate rejected: ${String(why)}` : errorMessage(err),
          refusedSoFar: this.refusedCallers.tls_error,
        });
      }
      socket.destroy();
    });
    this.server.on('session', (session) => this.onSession(session));
    this.server.on(
      'stream',
      guardStreamHandler(this.log, (stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, _flags: number, rawHeaders: string[]) =>
        this.onStream(stream, headers, rawHeaders),
      ),
    );
    this.server.on('unknownProtocol', (socket: TLSSocket) => {
      this.log.warn('agent connection did not negotiate HTTP/2 (ALPN h2); closed', { remoteAddress: remoteOf(socket) });
      socket.destroy();
    });
  }

  /**
   * Serves a new certificate (and client CA) from the next TLS handshake on;
   * established agent connections keep theirs.
   */
  setTLS(tls: AgentEndpointTLS): void {
    this.server.setSecureContext({ cert: tls.cert, key: tls.key, ca: tls.ca, minVersion: 'TLSv1.2' });
    this.log.info('serving certificate replaced for new agent connections');
  }

  async start(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port, this.opts.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.listening = true;
    this.server.on('error', (err) => this.log.error('agent endpoint error', { error: errorMessage(err) }));
    const a = this.address;
    this.log.info('listening for agents', { address: `${a.address}:${a.port}`, serverID: this.opts.serverID });
  }

  get address(): AddressInfo {
    return this.server.address() as AddressInfo;
  }

  /** Connections open on the agent port, handshaking ones included. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  private onSession(session: Http2Session): void {
    const state: SessionState = {
      pings: new PingPolicy({ minTimeMs: this.opts.minPingIntervalMs }),
      lastStreamID: 0,
      remoteAddress: remoteOf(session.socket),
    };
    this.sessions.set(session, state);
    try {
      session.setLocalWindowSize(this.opts.connectionWindowSize);
    } catch (err: unknown) {
      this.log.warn('could not raise the HTTP/2 connection window', { error: errorMessage(err) });
    }
    session.on('ping', () => this.onPing(session, state));
    session.on('error', (err) => {
      this.log.verbose(2, 'agent connection error', { remoteAddress: state.remoteAddress, error: errorMessage(err) });
    });
    session.once('close', () => {
      state.keepalive?.stop();
      clearTimeout(state.closeTimer);
      this.sessions.delete(session);
    });
    this.startKeepalive(session, state);
  }

  private startKeepalive(session: Http2Session, state: SessionState): void {
    const timeoutMs = this.opts.keepaliveTimeoutMs;
    state.keepalive = new Keepalive(session, {
      intervalMs: () => this.opts.keepaliveTimeMs,
      timeoutMs,
      onTimeout: () => {
        this.log.warn('agent connection did not answer a keepalive ping; closing it', { remoteAddress: state.remoteAddress, timeoutMs });
        for (const s of this.streams.get(session) ?? []) s.abort(`no answer to a keepalive ping within ${timeoutMs} ms`);
        session.destroy();
      },
    });
    state.keepalive.start();
  }


  /**
   * grpc-go's ping policy (pkg/grpc/ping-policy.ts). On too many pings the
   * calls in flight end first, with the reason in their status (a Node client
   * drops its streams the moment it sees a GOAWAY with an error code); then
   * GOAWAY ENHANCE_YOUR_CALM "too_many_pings", once, and a graceful close.
   */
  private onPing(session: Http2Session, state: SessionState): void {
    if (state.pings.onPing() !== TOO_MANY_PINGS || session.destroyed) return;
    const message = `${TOO_MANY_PINGS}: the agent pinged more often than every ${this.opts.minPingIntervalMs} ms while we sent nothing`;
    this.log.warn('agent pings too often; sending GOAWAY too_many_pings', {
      remoteAddress: state.remoteAddress,
      minPingIntervalMs: this.opts.minPingIntervalMs,
    });
    const goaway = (): void => {
      if (session.destroyed || session.closed) return;
      clearTimeout(state.closeTimer);
      session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, state.lastStreamID, Buffer.from(TOO_MANY_PINGS));
      session.close();
      state.closeTimer = setTimeout(() => session.destroy(), TOO_MANY_PINGS_GRACE_MS);
      state.closeTimer.unref();
    };
    const inFlight = [...(this.streams.get(session) ?? [])];
    let open = inFlight.length;
    if (open === 0) return goaway();
    for (const s of inFlight) {
      s.onceClosed(() => {
        if (--open === 0) goaway();
      });
      s.end(GrpcStatus.UNAVAILABLE, message);
    }
    // A peer that never takes its trailers gets the GOAWAY anyway.
    state.closeTimer = setTimeout(goaway, TOO_MANY_PINGS_GRACE_MS);
    state.closeTimer.unref();
  }

  private refuse(call: IncomingCall, refusal: CallRefusal, remoteAddress: string, state: SessionState | undefined): void {
    if (refusal.message.startsWith('too many agents are connecting')) {
      // A reconnect storm refuses hundreds at once: one summary line every few seconds, not one each.
      const now = Date.now();
      if (now - this.lastRateLog >= 5000) {
        this.lastRateLog = now;
        this.log.warn('agents refused by the connect rate limit; they retry after a backoff', {
          refusedSoFar: this.refusedForConnectRate,
          limitPerSecond: this.connectRate?.perSecond,
        });
      }
    } else {
      this.limited.warn('agent call rejected', { remoteAddress, grpcStatus: refusal.code, error: refusal.message });
    }
    if (call.refuse(refusal)) state?.pings.headersSent();
  }

  private onStream(stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders, rawHeaders: string[]): void {
    const session = stream.session;
    const state = session === undefined ? undefined : this.sessions.get(session);
    const remoteAddress = state?.remoteAddress ?? 'unknown';
    if (state !== undefined && stream.id !== undefined) state.lastStreamID = Math.max(state.lastStreamID, stream.id);
    stream.on('error', (err) => {
      this.log.verbose(2, 'agent stream error', { remoteAddress, error: errorMessage(err) });
    });
    const call = new IncomingCall(stream, headers, rawHeaders);
    const meta = this.admit(call);
    if ('code' in meta) {
      this.refuse(call, meta, remoteAddress, state);
      return;
    }
    // Flow control only when the agent announced its window and we offer one.
    const flow =
      meta.agentWindow !== undefined && this.opts.connWindow > 0
        ? { sendWindow: meta.agentWindow, receiveWindow: this.opts.connWindow }
        : undefined;
    // Headers go out at once, before any packet: agents block reading them.
    const responseMetadata: Record<string, string> = { serverid: this.opts.serverID, servercount: String(this.opts.serverCount) };
    if (flow !== undefined) responseMetadata[CONN_WINDOW_HEADER] = String(flow.receiveWindow);
    const halfClose = meta.halfClose && this.opts.halfClose;
    if (halfClose) responseMetadata[HALF_CLOSE_HEADER] = '1';
    call.accept(responseMetadata);
    state?.pings.headersSent();
    const link = new ServerPacketCall(stream, {
      maxMessageSize: this.opts.maxMessageSize,
      writeTracker: state?.pings,
      controlBufferLimit: this.opts.controlBufferLimit,
      onControlRefused: () => this.refusedControlPackets++,
      onPacketSent: (type) => this.tunnel.metrics.packetSent(type),
      logger: this.log.child({ agentID: meta.agentID }),
    });
    const info = {
      agentID: meta.agentID,
      identifiers: meta.identifiers,
      remoteAddress,
      certSubject: peerCertSubject(session),
      flow,
      halfClose,
      roundTripMs: () => state?.keepalive?.lastRoundTripMs,
    };
    const backend = this.tunnel.attachAgent(info, link);
    if (backend.closed) return;
    if (session === undefined) {
      // The connection went away while we answered: one removal path, the tunnel's.
      this.tunnel.detachAgent(backend, 'connection closed before the call was served');
      return;
    }
    this.serve(session, link, backend, meta.identityKeys);
  }

  /** Identity keys over their limit, if any. */
  private overStreamLimit(keys: readonly string[]): { key: string; open: number } | undefined {
    for (const key of keys) {
      const open = this.streamsByIdentity.get(key) ?? 0;
      if (open >= this.opts.maxStreamsPerAgent) return { key, open };
    }
    return undefined;
  }

  private countStreams(keys: readonly string[], delta: 1 | -1): void {
    for (const key of keys) {
      const n = (this.streamsByIdentity.get(key) ?? 0) + delta;
      if (n <= 0) this.streamsByIdentity.delete(key);
      else this.streamsByIdentity.set(key, n);
    }
  }

  /** Whether we take this call now, and the agent's metadata if so. */
  private admit(call: IncomingCall): AgentMetadata | CallRefusal {
    if (this.closing !== undefined) return { code: GrpcStatus.UNAVAILABLE, message: 'yurt-tunnel-server is shutting down' };
    if (this.connectRate !== undefined && !this.connectRate.tryTake()) {
      this.refusedForConnectRate++;
      return {
        code: GrpcStatus.UNAVAILABLE,
        message: `too many agents are connecting (limit ${this.connectRate.perSecond} per second, --max-agent-connect-rate); retry after a backoff`,
      };
    }
    return call.check([AGENT_CONNECT_PATH]) ?? this.readAgentMetadata(call);
  }

  private readAgentMetadata(call: IncomingCall): AgentMetadata | CallRefusal {
    const ids = call.metadata('agentid');
    if (ids.length !== 1 || ids[0] === '') {
      const got = ids.length === 1 ? 'an empty one' : String(ids.length);
      return { code: GrpcStatus.INVALID_ARGUMENT, message: `expected one agent ID in the "agentid" metadata, got ${got}` };
    }
    const agentID = ids[0]!;
    const idValues = call.metadata('agentidentifiers');
    if (idValues.length > 1) {
      return { code: GrpcStatus.INVALID_ARGUMENT, message: `expected at most one "agentidentifiers" metadata value, got ${idValues.length}` };
    }
    const identifiers = parseAgentIdentifiers(idValues[0] ?? '', (key) => {
      this.log.warn('ignoring unknown agent identifier key', { agentID, key });
    });
    const peer = (call.stream.session?.socket as TLSSocket | undefined)?.getPeerCertificate();
    const verdict = checkAgentIdentity(peer, agentID, identifiers, this.opts.identityCheck);
    if (!verdict.ok) {
      this.log.warn('agent refused by the identity check', {
        agentID,
        identityCheck: this.opts.identityCheck,
        claim: `${verdict.check}=${verdict.claimed}`,
        reason: verdict.reason,
      });
      return { code: GrpcStatus.PERMISSION_DENIED, message: `agent identity check (${this.opts.identityCheck}) failed: ${verdict.reason}` };
    }
    const fingerprint = peer?.fingerprint256;
    const identityKeys = [`id:${agentID}`];
    if (fingerprint !== undefined && fingerprint !== '') identityKeys.push(`cert:${fingerprint}`);
    const over = this.overStreamLimit(identityKeys);
    if (over !== undefined) {
      this.refusedForStreamLimit++;
      const by = over.key.startsWith('id:') ? `agentID ${agentID}` : `the client certificate of agent ${agentID}`;
      return {
        code: GrpcStatus.RESOURCE_EXHAUSTED,
        message:
          `too many Connect streams: ${by} already holds ${over.open} (limit ${this.opts.maxStreamsPerAgent}, ` +
          'the server flag --max-agent-streams); close one or raise the limit',
      };
    }
    return {
      agentID,
      identifiers,
      agentWindow: parseConnWindow(call.metadata(CONN_WINDOW_HEADER)),
      halfClose: announcesHalfClose(call.metadata(HALF_CLOSE_HEADER)),
      identityKeys,
    };
  }

  /** Reads the agent's packets into the tunnel until the call ends. */
  private serve(session: Http2Session, link: ServerPacketCall, backend: Backend, identityKeys: readonly string[]): void {
    this.countStreams(identityKeys, 1);
    let sessionStreams = this.streams.get(session);
    if (sessionStreams === undefined) {
      sessionStreams = new Set();
      this.streams.set(session, sessionStreams);
    }
    const streams = sessionStreams;
    streams.add(link);
    link.start({
      onPacket: (p) => this.tunnel.handlePacket(backend, p),
      onClose: (reason) => {
        streams.delete(link);
        if (streams.size === 0) this.streams.delete(session);
        this.countStreams(identityKeys, -1);
        this.tunnel.detachAgent(backend, reason);
      },
    });
  }

  /**
   * Stops accepting agents, ends every agent call with UNAVAILABLE and closes
   * every connection (after `graceMs` for them to go by themselves). Idempotent.
   */
  /** Takes no new agent connections; those already up keep their streams. */
  stopAccepting(): void {
    if (this.listening && this.server.listening) this.server.close();
  }

  close(graceMs = 1000): Promise<void> {
    this.closing ??= this.doClose(graceMs);
    return this.closing;
  }

  private async doClose(graceMs: number): Promise<void> {
    const closed = this.listening
      ? new Promise<void>((resolve) => this.server.close(() => resolve()))
      : Promise.resolve();
    for (const set of this.streams.values()) for (const s of set) s.end(GrpcStatus.UNAVAILABLE, 'yurt-tunnel-server is shutting down');
    this.streams.clear();
    for (const session of this.sessions.keys()) session.close();
    if (this.sessions.size > 0) {
      const allClosed = Promise.all([...this.sessions.keys()].map((s) => new Promise((r) => s.once('close', r))));
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([allClosed, new Promise<void>((r) => (timer = setTimeout(r, graceMs)))]);
      clearTimeout(timer);
    }
    for (const session of this.sessions.keys()) session.destroy();
    for (const socket of this.sockets) socket.destroy();
    await closed;
    this.limited.flush();
    this.log.verbose(2, 'agent endpoint closed');
  }
}
