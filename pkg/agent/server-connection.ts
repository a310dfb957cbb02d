// One agent ↔ server link: its own HTTP/2 connection over mutual TLS and one
// `AgentService/Connect` call, its keepalive, and the switch of the packets
// the server sends. The dials it answers and the connections made through it
// are link-connections.ts's.
//
// The call is plain gRPC on the wire; we speak it with node:http2 and the
// shared framing (pkg/grpc) rather than grpc-js, which
// copies every message twice on its way out and hides TLS errors behind
// "Failed to connect".

import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { isIP } from 'node:net';
import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { ConnectionClosedError, errorMessage, ServerConnectionError } from '../protocol/errors.js';
import { HALF_CLOSE_HEADER, announcesHalfClose } from '../protocol/half-close.js';
import { CONN_WINDOW_HEADER, DEFAULT_CONN_WINDOW, parseConnWindow, type FlowWindows } from '../protocol/flow-control.js';
import { describePacket, unhandledPacketType, type KnownPacket, type Packet } from '../protocol/packet.js';
import { splitHostPort, type Dialer } from './dialer.js';
import type { AgentMetrics } from './metrics.js';
import { DialLimit } from './dial-limit.js';
import { LinkConnections } from './link-connections.js';
import { ClientPacketCall } from '../grpc/client-call.js';
import { metadataValues } from '../grpc/metadata.js';
import { AGENT_CONNECT_PATH } from '../grpc/services.js';
import { responseRefusal, startCall } from '../grpc/client-call-head.js';
import { Keepalive } from '../grpc/keepalive.js';

/** A server that refuses our certificate closes within this long of the TLS handshake (TLS 1.3 reports no alert). */
const CERT_REFUSAL_WINDOW_MS = 1000;

/** SNI sent when the server is addressed by IP (servers select no certificate by it). */
const IP_TARGET_SNI = 'yurt-tunnel-server';

export interface AgentTLS {
  /** CA bundle that signs the server's certificate. */
  ca: string;
  cert: string;
  key: string;
}

/** Keepalive interval shared by a client set's links, so a server's complaint slows them all. */
export interface KeepalivePolicy {
  timeMs: number;
}

export interface ServerConnectionOptions {
  /** host:port of the server's agent endpoint. */
  address: string;
  /** Name to verify in the server's certificate; default the host of `address`. */
  serverName?: string;
  tls: AgentTLS;
  agentID: string;
  /** The `agentidentifiers` metadata value. */
  identifiers: string;
  dialer: Dialer;
  /** Keepalive ping interval. Default 35 s: Go servers forbid pings more often than every 30 s. */
  keepaliveTimeMs?: number;
  /** Shared, adjustable keepalive (overrides keepaliveTimeMs). */
  keepalive?: KeepalivePolicy;
  /** How long a ping may go unanswered. Default 20 s. */
  keepaliveTimeoutMs?: number;
  /** How long to wait for the server's response headers. Default 30 s. */
  handshakeTimeoutMs?: number;
  /** HTTP/2 receive window per stream (connection: 4×). Default 4 MiB. */
  receiveWindow?: number;
  /**
   * Receive window per connection announced to the server for yurt-tunnel
   * flow control; 0 does not announce it (upstream behaviour). Default 1 MiB.
   */
  connWindow?: number;
  /** Announce half-close (CLOSE_WRITE) to the server. Default true. */
  halfClose?: boolean;
  connHighWaterMark?: number;
  /**
   * Bytes a connection takes from its target socket and holds while the link
   * or the server's window is busy, before the socket is paused (the
   * connection's writable highWaterMark). Default CONN_SEND_HIGH_WATER_MARK.
   */
  connSendHighWaterMark?: number;
  /** Dials running at once; share one across links to bound the whole agent. Default: 256 for this link. */
  dialLimit?: DialLimit;
  /** Counts dials and packets; shared by every link of a client set. */
  metrics?: AgentMetrics;
  /** Told whenever a connection through this link has closed (a drain waits on it). */
  onConnectionClosed?: () => void;
  logger?: Logger;
}

/** The server's identity, from its response headers. */
export interface ServerIdentity {
  serverID: string;
  serverCount: number;
  /** Per-connection flow control, when the server agreed to it. */
  flow: FlowWindows | undefined;
  /** Half-close (CLOSE_WRITE), when the server agreed to it. */
  halfClose: boolean;
}

export class ServerConnection {
  readonly address: string;
  identity: ServerIdentity | undefined;
  private readonly opts: ServerConnectionOptions;
  private readonly log: Logger;
  private readonly verifyName: string;
  private readonly keepalive: KeepalivePolicy;
  private session: ClientHttp2Session | undefined;
  private link: ClientPacketCall | undefined;
  private readonly conns: LinkConnections;
  private closedReason: string | undefined;
  private readonly closeWaiters: Array<(reason: string) => void> = [];
  private sweepTimer: NodeJS.Timeout | undefined;
  private keepaliveLoop: Keepalive | undefined;

  constructor(opts: ServerConnectionOptions) {
    this.opts = opts;
    this.address = opts.address;
    this.log = (opts.logger ?? silentLogger()).child({ server: opts.address });
    this.conns = new LinkConnections(
      {
        dialer: opts.dialer,
        dialLimit: opts.dialLimit ?? new DialLimit(),
        connHighWaterMark: opts.connHighWaterMark,
        connSendHighWaterMark: opts.connSendHighWaterMark,
        metrics: opts.metrics,
        onConnectionClosed: opts.onConnectionClosed,
        log: this.log,
      },
      (p) => this.send(p),
    );
    // The server certificate is checked against serverName, or the address's host (an IP SAN for an IP).
    this.verifyName = opts.serverName ?? splitHostPort(opts.address)?.host ?? opts.address;
    this.keepalive = opts.keepalive ?? { timeMs: opts.keepaliveTimeMs ?? 35_000 };
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  get connCount(): number {
    return this.conns.size;
  }

  get pendingDialCount(): number {
    return this.conns.pendingDialCount;
  }

  /** Connects and opens the call; resolves with the server's identity once its headers arrive. */
  open(): Promise<ServerIdentity> {
    const target = splitHostPort(this.address);
    if (target === undefined) {
      return Promise.reject(new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server address ${this.address} is not host:port`));
    }
    const session = this.connectSession(target);
    this.session = session;
    return new Promise<ServerIdentity>((resolve, reject) => {
      let settled = false;
      const settle = (err: Error | undefined, id?: ServerIdentity): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err !== undefined) {
          this.close(err.message);
          reject(err);
        } else {
          resolve(id!);
        }
      };
      const fail = (text: string): void => settle(new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server ${this.address}: ${text}`));
      const timeoutMs = this.opts.handshakeTimeoutMs ?? 30_000;
      const timer = setTimeout(
        () => settle(new ServerConnectionError('YT_ERR_HANDSHAKE_TIMEOUT', `no response from tunnel server ${this.address} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      timer.unref();
      this.watchSession(session, () => settled, fail);

      const connWindow = this.opts.connWindow ?? DEFAULT_CONN_WINDOW;
      let stream: ClientHttp2Stream;
      try {
        stream = startCall(session, AGENT_CONNECT_PATH, this.callMetadata(connWindow), 'yurt-tunnel-agent');
      } catch (err: unknown) {
        fail(errorMessage(err));
        return;
      }
      stream.on('error', (err) => {
        if (!settled) fail(errorMessage(err));
      });
      stream.once('response', (h: IncomingHttpHeaders, _flags: number, raw: string[]) => {
        const refusal = responseRefusal(h);
        if (refusal !== undefined) {
          fail(`refused the call (${refusal})`);
          return;
        }
        const identity = this.identityFrom(raw, connWindow);
        if (identity instanceof Error) {
          settle(identity);
          return;
        }
        this.identity = identity;
        const metrics = this.opts.metrics;
        const link = new ClientPacketCall(stream, {
          logger: this.log,
          ...(metrics !== undefined ? { onPacketSent: (type: string) => metrics.packetSent(type) } : {}),
        });
        this.link = link;
        this.conns.linkUp({ link, flow: identity.flow, halfClose: identity.halfClose });
        link.start({ onPacket: (p) => this.onPacket(p), onClose: (reason) => this.close(reason) });
        this.sweepTimer = setInterval(() => this.conns.sweep(), 10_000);
        this.sweepTimer.unref();
        settle(undefined, identity);
      });
    });
  }

  /** The HTTP/2 connection, over mutual TLS that checks the server's name. */
  private connectSession(target: { host: string; port: number }): ClientHttp2Session {
    const receiveWindow = this.opts.receiveWindow ?? 4 * 1024 * 1024;
    const authority = isIP(target.host) === 6 ? `[${target.host}]:${target.port}` : `${target.host}:${target.port}`;
    const session = http2.connect(`https://${authority}`, {
      ca: this.opts.tls.ca,
      cert: this.opts.tls.cert,
      key: this.opts.tls.key,
      // TLS SNI must be a DNS name (Node deprecates IPs there); for an IP address send a fixed name instead.
      servername: isIP(this.verifyName) === 0 ? this.verifyName : IP_TARGET_SNI,
      checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(this.verifyName, cert),
      ALPNProtocols: ['h2'],
      maxSessionMemory: 64,
      settings: { initialWindowSize: receiveWindow, enablePush: false },
    });
    session.once('connect', () => {
      try {
        session.setLocalWindowSize(receiveWindow * 4);
      } catch (err: unknown) {
        this.log.warn('could not raise the HTTP/2 connection window', { error: errorMessage(err) });
      }
      this.startKeepalive(session);
    });
    session.on('goaway', (code: number, _lastStreamID: number, data?: Buffer) => this.onGoaway(code, data));
    return session;
  }

  /** Reports errors and an early close of the connection, saying what most likely went wrong. */
  private watchSession(session: ClientHttp2Session, settled: () => boolean, fail: (text: string) => void): void {
    /** When TLS was established; a close within a moment of it is how a server refuses a client certificate. */
    let securedAt: number | undefined;
    session.once('connect', () => (securedAt = performance.now()));
    session.on('error', (err) => {
      if (!settled()) fail(errorMessage(err));
      else this.log.verbose(2, 'connection error', { error: errorMessage(err) });
    });
    session.once('close', () => {
      if (!settled()) {
        if (securedAt === undefined) fail('the connection closed during the TLS handshake');
        else if (performance.now() - securedAt < CERT_REFUSAL_WINDOW_MS) {
          fail(
            "the server closed the connection right after the TLS handshake: it most likely does not trust this agent's " +
              'client certificate (issued by a CA other than the one the server was given)',
          );
        } else fail('the connection closed before the server answered the call');
      }
      this.close('connection closed');
    });
  }

  private callMetadata(connWindow: number): Record<string, string> {
    const md: Record<string, string> = { agentid: this.opts.agentID };
    if (this.opts.identifiers !== '') md.agentidentifiers = this.opts.identifiers;
    if (connWindow > 0) md[CONN_WINDOW_HEADER] = String(connWindow);
    if (this.opts.halfClose !== false) md[HALF_CLOSE_HEADER] = '1';
    return md;
  }

  /** The server's identity from its response metadata. */
  private identityFrom(raw: string[], connWindow: number): ServerIdentity | ServerConnectionError {
    const ids = metadataValues(raw, 'serverid');
    const counts = metadataValues(raw, 'servercount');
    const serverCount = counts.length === 1 && /^\d+$/.test(counts[0]!) ? Number(counts[0]) : NaN;
    if (ids.length !== 1 || ids[0] === '' || Number.isNaN(serverCount)) {
      return new ServerConnectionError(
        'YT_ERR_BAD_HEADERS',
        `tunnel server ${this.address} sent no usable serverid/servercount headers ` +
          `(serverid=${JSON.stringify(ids)}, servercount=${JSON.stringify(counts)})`,
      );
    }
    const serverWindow = connWindow > 0 ? parseConnWindow(metadataValues(raw, CONN_WINDOW_HEADER)) : undefined;
    const flow = serverWindow !== undefined ? { sendWindow: serverWindow, receiveWindow: connWindow } : undefined;
    const halfClose = this.opts.halfClose !== false && announcesHalfClose(metadataValues(raw, HALF_CLOSE_HEADER));
    // Upstream: a count of 0 means "unknown", treated as 1.
    return { serverID: ids[0]!, serverCount: serverCount === 0 ? 1 : serverCount, flow, halfClose };
  }

  private startKeepalive(session: ClientHttp2Session): void {
    const timeoutMs = this.opts.keepaliveTimeoutMs ?? 20_000;
    this.keepaliveLoop = new Keepalive(session, {
      intervalMs: () => this.keepalive.timeMs,
      timeoutMs,
      onTimeout: () => {
        this.log.warn('tunnel server did not answer a keepalive ping; reconnecting', { timeoutMs });
        this.close(`no answer to a keepalive ping within ${timeoutMs} ms`);
      },
    });
    this.keepaliveLoop.start();
  }

  private onGoaway(code: number, data: Buffer | undefined): void {
    const text = data?.toString() ?? '';
    if (code === http2.constants.NGHTTP2_ENHANCE_YOUR_CALM && text === 'too_many_pings') {
      // As gRPC clients do: the server's policy is stricter than our interval, so double it.
      this.keepalive.timeMs *= 2;
      this.log.warn('tunnel server says we ping too often; doubling the keepalive interval', { keepaliveTimeMs: this.keepalive.timeMs });
    } else {
      this.log.verbose(2, 'tunnel server sent GOAWAY', { code, debug: text });
    }
  }

  /** The open connections, for /debug/connections. */
  connections(): ReturnType<LinkConnections['list']> {
    return this.conns.list();
  }

  private send(p: KnownPacket): void {
    this.link?.sendControl(p);
  }

  private onPacket(p: Packet): void {
    if (this.closed) return;
    this.opts.metrics?.packetReceived(p.type);
    if (this.log.enabled(4)) this.log.verbose(4, 'packet from server', describePacket(p));
    const type = p.type;
    switch (type) {
      case 'DIAL_REQ':
        this.conns.dial(p);
        return;
      case 'DATA': {
        const conn = this.conns.get(p.connectID);
        if (conn !== undefined) conn.deliver(p.data);
        else if (!this.conns.isTombstoned(p.connectID)) {
          this.send({ type: 'CLOSE_RSP', connectID: p.connectID, error: 'unrecognized connectID' });
        }
        return;
      }
      case 'CLOSE_REQ': {
        const conn = this.conns.get(p.connectID);
        // With an error (our server's extension) the caller's side failed: the target is reset, not closed.
        if (conn !== undefined)
          conn.remoteClose(p.error ? new ConnectionClosedError(`tunnel server ${this.address} ended the connection with an error: ${p.error}`) : undefined);
        else if (!this.conns.isTombstoned(p.connectID)) {
          this.send({ type: 'CLOSE_RSP', connectID: p.connectID, error: 'Unknown connectID' });
        }
        return;
      }
      case 'DIAL_CLS':
        this.conns.cancel(p.random);
        return;
      case 'WINDOW_UPDATE':
        if (this.identity?.flow !== undefined) this.conns.get(p.connectID)?.grantCredit(Number(p.bytes));
        else this.log.warn('ignoring WINDOW_UPDATE: flow control was not negotiated', describePacket(p));
        return;
      case 'CLOSE_WRITE':
        if (this.identity?.halfClose === true) this.conns.get(p.connectID)?.remoteEndWrite();
        else this.log.warn('ignoring CLOSE_WRITE: half-close was not negotiated', describePacket(p));
        return;
      case 'DIAL_RSP':
      case 'CLOSE_RSP':
      case 'DRAIN':
      case 'UNKNOWN':
        this.log.warn('ignoring a packet servers do not send', describePacket(p));
        return;
      default:
        this.log.warn('ignoring a packet of a type the agent does not know', { packetType: unhandledPacketType(type) });
    }
  }

  /** Tells the server this agent is going away (DRAIN). */
  drain(): void {
    if (!this.closed) this.send({ type: 'DRAIN' });
  }

  /** Resolves with the reason once the link is closed. */
  whenClosed(): Promise<string> {
    if (this.closedReason !== undefined) return Promise.resolve(this.closedReason);
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  /** Closes the call, the HTTP/2 connection and every connection made through it. Idempotent. */
  close(reason: string): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    clearInterval(this.sweepTimer);
    this.keepaliveLoop?.stop();
    this.link?.cancel(reason);
    // A failure for every connection on the link: their targets are reset.
    this.conns.closeAll(`connection to tunnel server ${this.address} closed: ${reason}`);
    this.session?.destroy();
    for (const w of this.closeWaiters.splice(0)) w(reason);
  }
}
