// One agent ↔ server link: its own HTTP/2 connection over mutual TLS and one
// `AgentService/Connect` call (or the same link over a WebSocket,
// server-dial-ws.ts), its keepalive, and the switch of the packets
// the server sends. The dials it answers and the connections made through it
// are link-connections.ts's.
//
// The call is plain gRPC on the wire; we speak it with node:http2 and the
// shared framing (pkg/grpc) rather than grpc-js, which
// copies every message twice on its way out and hides TLS errors behind
// "Failed to connect".

import http2, { type ClientHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { AgentLostError, ConnectionClosedError, type ResumeError } from '../protocol/errors.js';
import { DEFAULT_CONN_WINDOW } from '../protocol/flow-control.js';
import { describePacket, unhandledPacketType, type KnownPacket, type Packet } from '../protocol/packet.js';
import type { SessionClaim } from '../protocol/resume.js';
import { splitHostPort } from '../net/host-port.js';
import type { AgentMetrics } from './metrics.js';
import { DialLimit } from './dial-limit.js';
import { LinkConnections } from './link-connections.js';
import { ClientPacketCall } from '../grpc/client-call.js';
import { Keepalive, type Pingable } from '../grpc/keepalive.js';
import { linkTransport } from './link-transport.js';
import type { PacketLink } from '../mux/packet-link.js';
import { ResumableLink } from '../mux/resumable-link.js';
import type { KeepalivePolicy, ServerConnectionOptions } from './server-connection-options.js';
import { type DialTarget, type ServerIdentity } from './server-dial.js';
import { dialServerLink, type DialedCall } from './transport-choice.js';
import { WsClientCall } from './ws-client-call.js';

export type { AgentTLS, ServerIdentity } from './server-dial.js';

/** How long a goodbye waits for the server's trailers before the connection is destroyed. */
const GOODBYE_GRACE_MS = 1000;

/** A session the server gave this link (session resume). */
interface ResumeState {
  link: ResumableLink;
  token: string;
  windowMs: number;
  /** Calls that asked for this session so far (the server ignores an older one). */
  attempt: number;
  suspendedAt: number | undefined;
  timer: NodeJS.Timeout | undefined;
}

export class ServerConnection {
  readonly address: string;
  identity: ServerIdentity | undefined;
  private readonly opts: ServerConnectionOptions;
  /**
   * Read per packet, so a field of our own: the client set's options and the
   * rehearsal's are objects of different shapes, and reading through them
   * threw the rehearsal's optimised onPacket away at the first real packet.
   */
  private readonly metrics: AgentMetrics | undefined;
  private readonly log: Logger;
  private readonly verifyName: string;
  private readonly keepalive: KeepalivePolicy;
  private session: ClientHttp2Session | undefined;
  private socket: Socket | undefined;
  private call: ClientPacketCall | WsClientCall | undefined;
  private resume: ResumeState | undefined;
  /** No suspension from now on: the agent drains or the server said DRAIN. */
  private noResume = false;
  private readonly conns: LinkConnections;
  private closedReason: string | undefined;
  private readonly closeWaiters: Array<(reason: string) => void> = [];
  private sweepTimer: NodeJS.Timeout | undefined;
  private keepaliveLoop: Keepalive | undefined;

  constructor(opts: ServerConnectionOptions) {
    this.opts = opts;
    this.metrics = opts.metrics;
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

  /** The link dropped without a goodbye; its connections wait for a resume. */
  get suspended(): boolean {
    return this.resume?.suspendedAt !== undefined && !this.closed;
  }

  /** The session's token, for a resume offer's match (never logged). */
  get sessionToken(): string | undefined {
    return this.resume?.token;
  }

  get connCount(): number {
    return this.conns.size;
  }

  get pendingDialCount(): number {
    return this.conns.pendingDialCount;
  }

  /** The claim a call presents to take this suspended session back (each call a higher attempt). */
  nextClaim(): SessionClaim | undefined {
    const r = this.resume;
    if (r === undefined || r.suspendedAt === undefined || this.closed) return undefined;
    r.attempt++;
    return { token: r.token, received: r.link.received, attempt: r.attempt };
  }

  /** Connects and opens the call; resolves with the server's identity once its headers arrive. */
  async open(claims: SessionClaim[] = []): Promise<ServerIdentity> {
    const dialed = await dialServerLink(this.dialTarget(claims), this.log);
    this.adopt(dialed);
    return dialed.identity;
  }

  /** Where and how to dial, with the sessions to ask back. */
  dialTarget(claims: SessionClaim[]): DialTarget {
    const windowMs = this.opts.resumeWindowMs ?? 0;
    return {
      address: this.address,
      verifyName: this.verifyName,
      tls: this.opts.tls,
      agentID: this.opts.agentID,
      identifiers: this.opts.identifiers,
      receiveWindow: this.opts.receiveWindow ?? 4 * 1024 * 1024,
      connWindow: this.opts.connWindow ?? DEFAULT_CONN_WINDOW,
      halfClose: this.opts.halfClose !== false,
      handshakeTimeoutMs: this.opts.handshakeTimeoutMs ?? 30_000,
      resume: windowMs > 0 ? { windowMs, claims } : undefined,
      proxy: this.opts.proxy,
      transport: this.opts.transport,
    };
  }

  /** Carries a new link on a call the server answered: a fresh session when it offers one. */
  adopt(dialed: DialedCall): void {
    const offer = dialed.offer;
    if (offer !== undefined && offer.resumedReceived === undefined) {
      const link = new ResumableLink({ onPacket: (p) => this.onPacket(p), onBroken: (err) => this.onBroken(err) });
      this.resume = { link, token: offer.token, windowMs: offer.windowMs, attempt: 0, suspendedAt: undefined, timer: undefined };
    }
    this.takeCall(dialed, 0);
    this.sweepTimer = setInterval(() => this.conns.sweep(), 10_000);
    this.sweepTimer.unref();
  }

  /** A call the server answered with `resumed`: this suspended session goes on over it; what the server lacks is resent. */
  resumeOn(dialed: DialedCall, serverReceived: number): void {
    const r = this.resume!;
    clearTimeout(r.timer);
    r.timer = undefined;
    const pausedMs = r.suspendedAt === undefined ? 0 : Date.now() - r.suspendedAt;
    r.suspendedAt = undefined;
    const before = { packets: r.link.resentPackets, bytes: r.link.resentBytes };
    this.takeCall(dialed, serverReceived);
    this.metrics?.sessionResumed(r.link.resentBytes - before.bytes);
    this.log.info('link to tunnel server resumed', {
      serverID: this.identity?.serverID,
      suspendedForMs: pausedMs,
      resentPackets: r.link.resentPackets - before.packets,
      resentBytes: r.link.resentBytes - before.bytes,
      connections: this.conns.size,
    });
  }

  private takeCall(dialed: DialedCall, peerReceived: number): void {
    const { identity } = dialed;
    this.socket = dialed.socket;
    this.identity = identity;
    const metrics = this.metrics;
    const callOpts = {
      logger: this.log,
      ...(metrics !== undefined ? { onPacketSent: (type: string) => metrics.packetSent(type) } : {}),
    };
    if (dialed.transport === 'grpc') {
      this.session = dialed.session;
      dialed.session.on('goaway', (code: number, _lastStreamID: number, data?: Buffer) => this.onGoaway(code, data));
    }
    const { call, pings, received, gone } = linkTransport(dialed, callOpts, this.log, (c, reason) => this.callEnded(c, reason));
    this.call = call;
    const r = this.resume;
    // With flow control (our server), the link measures its round trip at once: the windows are sized by it.
    const flow = identity.flow && { ...identity.flow, roundTripMs: () => this.keepaliveLoop?.minRoundTripMs };
    const measureAtStart = flow !== undefined;
    // With a session the call's packets go to its resumable link (which hands them on to onPacket), without one straight there.
    if (r !== undefined) this.startLivenessWatch(pings, received, r.windowMs, call, measureAtStart);
    else this.startKeepalive(pings, received, measureAtStart);
    this.conns.linkUp({ link: r?.link ?? call, flow, halfClose: identity.halfClose });
    call.start({
      onPacket: r !== undefined ? (p) => r.link.receive(call, p) : (p) => this.onPacket(p),
      onClose: (reason) => this.callEnded(call, reason),
    });
    r?.link.attach(call, peerReceived);
    if (gone()) this.callEnded(call, 'connection closed');
  }

  /** The call `call` ended: suspend the session if it was a failure and it may resume, else close. */
  private callEnded(call: ClientPacketCall | WsClientCall, reason: string): void {
    if (this.call !== call || this.closed) return;
    const r = this.resume;
    if (r === undefined || call.endedByServer || this.noResume) {
      this.close(reason);
      return;
    }
    this.suspend(r, reason);
  }

  private suspend(r: ResumeState, reason: string): void {
    const call = this.call;
    this.call = undefined;
    r.link.detach();
    this.stopTransport();
    call?.cancel(reason);
    this.destroyTransport();
    r.suspendedAt = Date.now();
    r.timer = setTimeout(() => this.expire('window'), r.windowMs);
    r.timer.unref();
    this.metrics?.linkSuspended();
    this.log.info('link to tunnel server dropped; keeping its connections for the resume window', {
      serverID: this.identity?.serverID,
      reason,
      connections: this.conns.size,
      pendingDials: this.conns.pendingDialCount,
      windowMs: r.windowMs,
    });
    this.opts.onSuspended?.(reason);
  }

  /** The session will not be resumed: its connections end with YT_ERR_AGENT_LOST. */
  expire(why: 'window' | 'lost_by_server' | 'server_gone'): void {
    const r = this.resume;
    if (r === undefined || this.closed) return;
    const server = this.identity?.serverID ?? this.address;
    const message =
      why === 'window'
        ? `the link to tunnel server ${server} did not come back within the ${r.windowMs} ms resume window`
        : why === 'lost_by_server'
          ? `tunnel server ${server} no longer holds this agent's session`
          : `tunnel server ${server} is gone: the agent holds links to as many servers as ${this.address} announces, all of them others`;
    this.metrics?.sessionExpired(why);
    this.log.warn('session with the tunnel server expired; closing its connections', {
      serverID: this.identity?.serverID,
      reason: why,
      connections: this.conns.size,
    });
    this.close(message, new AgentLostError(message));
  }

  private onBroken(err: ResumeError): void {
    this.metrics?.sessionExpired(err.code);
    this.close(`the session with the tunnel server broke: ${err.message}`);
  }

  private destroyTransport(): void {
    this.session?.destroy();
    this.socket?.destroy();
    this.session = undefined;
    this.socket = undefined;
  }

  private stopTransport(): void {
    this.keepaliveLoop?.stop();
    this.keepaliveLoop = undefined;
  }

  /**
   * With session resume the agent must notice a dark path within the window, not after the
   * minute gRPC keepalive takes: a ping after a quarter of the window heard nothing, and
   * the link is lost when nothing at all comes back within another quarter. It is also what
   * notices a reset that comes while the session is blocked in a large write: Node's HTTP/2
   * session does not read until that write completes, and over TLS the failed write is not
   * reported. Making the session's socket read from outside (its internal handle) did
   * notice it at once, and crashed the process in Node's HTTP/2 code (issue 33).
   */
  private startLivenessWatch(pings: Pingable, received: () => number, windowMs: number, call: ClientPacketCall | WsClientCall, measureAtStart: boolean): void {
    this.keepaliveLoop = new Keepalive(pings, {
      measureAtStart,
      intervalMs: () => windowMs / 4,
      timeoutMs: windowMs / 4,
      received,
      onTimeout: (silentMs) => {
        this.log.warn('nothing heard from the tunnel server; taking the link for lost', { silentMs: Math.round(silentMs) });
        this.callEnded(call, `nothing heard from the server for ${Math.round(silentMs)} ms`);
      },
    });
    this.keepaliveLoop.start();
  }

  private startKeepalive(pings: Pingable, received: () => number, measureAtStart: boolean): void {
    const timeoutMs = this.opts.keepaliveTimeoutMs ?? 20_000;
    this.keepaliveLoop = new Keepalive(pings, {
      measureAtStart,
      intervalMs: () => this.keepalive.timeMs,
      received,
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

  /** What connections write to: the session's resumable link, or the call. */
  private get packetLink(): PacketLink | undefined {
    return this.resume?.link ?? this.call;
  }

  private send(p: KnownPacket): void {
    this.packetLink?.sendControl(p);
  }

  private onPacket(p: Packet): void {
    if (this.closed) return;
    this.metrics?.packetReceived(p.type);
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
    this.noResume = true;
    if (!this.closed) this.send({ type: 'DRAIN' });
  }

  /** Resolves with the reason once the link is closed. */
  whenClosed(): Promise<string> {
    if (this.closedReason !== undefined) return Promise.resolve(this.closedReason);
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  /**
   * Closes the call, the HTTP/2 connection and every connection made through
   * it. Idempotent. A call still up gets a goodbye (half-close) when the link
   * resumes, so that the server does not keep the session.
   */
  close(reason: string, err: Error = new ConnectionClosedError(`connection to tunnel server ${this.address} closed: ${reason}`)): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    clearInterval(this.sweepTimer);
    this.stopTransport();
    const r = this.resume;
    if (r !== undefined) clearTimeout(r.timer);
    const session = this.session;
    const socket = this.socket;
    if (this.call instanceof WsClientCall) {
      this.call.goodbyeAndClose(reason, GOODBYE_GRACE_MS);
      this.socket = undefined;
    } else if (r !== undefined && this.call !== undefined && session !== undefined && !session.destroyed) {
      this.call.goodbye(reason);
      session.close();
      const timer = setTimeout(() => {
        session.destroy();
        socket?.destroy();
      }, GOODBYE_GRACE_MS);
      timer.unref();
      session.once('close', () => clearTimeout(timer));
    } else {
      // Without resume the server keeps nothing for us: a goodbye (END_STREAM, then GOAWAY as the session goes) when the call is still up.
      this.call?.goodbye(reason);
      this.destroyTransport();
    }
    // A failure for every connection on the link: their targets are reset.
    this.conns.closeAll(err);
    r?.link.close(err);
    for (const w of this.closeWaiters.splice(0)) w(reason);
  }
}
