// The tunnel server's core: the packet switch between callers of `dial()` and
// agent streams. It knows nothing about HTTP, gRPC transport or Kubernetes:
// an agent's stream is an AgentLink, and it ends with an AgentLinkEnd. A dial
// from DIAL_REQ to its connection is dials.ts's; session resume (tokens,
// suspension, resend, expiry) is sessions.ts's, through which every agent call
// is admitted.

import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { AgentLostError, ConnectionClosedError, type DialFailureReason } from '../protocol/errors.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import { newDialID } from '../protocol/ids.js';
import { describePacket, unhandledPacketType, type Packet } from '../protocol/packet.js';
import { IdleWaiters } from '../timers/idle.js';
import type { AgentLink, AgentLinkEnd } from './agent-link.js';
import { Backend, type BackendInfo } from './backend.js';
import { BackendRegistry, type ProxyStrategy } from './backend-registry.js';
import { Dials, type DialCaller } from './dials.js';
import { TunnelMetrics } from './metrics.js';
import type { TunnelConn } from './tunnel-conn.js';
import type { TunnelRelay } from './tunnel-relay.js';
import { checkDialAddress, DEFAULT_MAX_PENDING_DIALS_PER_AGENT, type DialOptions, type TunnelOptions } from './options.js';
import { DEFAULT_MAX_UNKNOWN_PACKETS, UNKNOWN_PACKET_WINDOW_MS } from './unknown-packets.js';
import { Sessions } from './sessions.js';

const TOMBSTONE_SWEEP_MS = 10_000;

export class Tunnel {
  readonly registry = new BackendRegistry();
  readonly metrics: TunnelMetrics;
  /** How every agent call is admitted, and the resumable sessions (session resume). */
  readonly sessions: Sessions;
  private readonly dials: Dials;
  private readonly strategies: readonly ProxyStrategy[];
  private readonly dialTimeoutMs: number;
  private readonly maxPendingDialsPerAgent: number;
  private readonly maxUnknownPacketsPerAgent: number;
  private readonly loopCheck: TunnelOptions['loopCheck'];
  private readonly log: Logger;
  private readonly limited: LogLimiter;
  private readonly sweepTimer: NodeJS.Timeout;
  /** Whoever waits for the last connection and dial to end (a graceful shutdown). */
  private readonly idle = new IdleWaiters(() => this.establishedCount() + this.dials.size);
  private stopped = false;
  private closing: Promise<void> | undefined;

  constructor(opts: TunnelOptions = {}) {
    this.strategies = opts.strategies ?? ['destHost'];
    if (this.strategies.length === 0) throw new TypeError('at least one proxy strategy is required');
    this.dialTimeoutMs = opts.dialTimeoutMs ?? 10_000;
    this.maxPendingDialsPerAgent = opts.maxPendingDialsPerAgent ?? DEFAULT_MAX_PENDING_DIALS_PER_AGENT;
    this.maxUnknownPacketsPerAgent = opts.maxUnknownPacketsPerAgent ?? DEFAULT_MAX_UNKNOWN_PACKETS;
    this.loopCheck = opts.loopCheck;
    this.log = opts.logger ?? silentLogger();
    this.limited = new LogLimiter(this.log);
    this.metrics = new TunnelMetrics(
      {
        backends: () => this.registry.all().length,
        agents: () => this.registry.agentCount,
        pendingDials: () => this.dials.size,
        establishedConnections: () => this.establishedCount(),
      },
      opts.metricsRegistry,
      () => {
        const open = { to_agent: 0, from_agent: 0 };
        for (const b of this.registry.all()) {
          for (const c of b.conns.values()) {
            open.to_agent += c.bytesSent;
            open.from_agent += c.bytesReceived;
          }
        }
        return open;
      },
    );
    this.dials = new Dials({
      metrics: this.metrics,
      log: this.log,
      newDialID: opts.newDialID ?? newDialID,
      conn: {
        highWaterMark: opts.connHighWaterMark,
        lingerAfterEndMs: opts.lingerAfterEndMs ?? 60_000,
        stallTimeoutMs: opts.stalledConnectionTimeoutMs ?? 5000,
      },
      onSettled: () => this.idle.check(),
      onUnknownAnswer: (backend, ids) => this.unknownPacket(backend, 'DIAL_RSP', ids),
    });
    this.sessions = new Sessions(this, { log: this.log, limited: this.limited, registry: this.metrics.registry, memoryBudget: opts.resumeMemoryBudget });
    this.sweepTimer = setInterval(() => {
      for (const b of this.registry.all()) b.conns.sweep();
    }, TOMBSTONE_SWEEP_MS);
    this.sweepTimer.unref();
  }

  /** The tunnel is closing or closed: it takes no dial and no agent. */
  get closed(): boolean {
    return this.stopped;
  }

  // ------------------------------------------------------------ dialing

  /**
   * Opens a TCP connection to `address` (host:port) through the agent that
   * serves it. Resolves once the agent's DIAL_RSP says it is connected;
   * rejects with a DialError whose `code` says why not (YT_ERR_DIAL_CANCELLED
   * once `opts.signal` aborts). The connection is a TunnelConn, a Duplex; with
   * `relay: true`, a TunnelRelay to be joined to a socket (relay.attach),
   * without a stream object per connection.
   */
  dial(address: string, opts?: DialOptions & { relay?: false }): Promise<TunnelConn>;
  dial(address: string, opts: DialOptions & { relay: true }): Promise<TunnelRelay>;
  dial(address: string, opts: DialOptions & { relay?: boolean } = {}): Promise<TunnelConn | TunnelRelay> {
    return new Promise((resolve, reject) => this.startDial(address, opts, { relay: opts.relay === true, resolve, reject }));
  }

  /** Whether a connected agent serves `host` under the proxy strategies (what a dial to it would pick). */
  serves(host: string): boolean {
    return this.registry.pick(this.strategies, host) !== undefined;
  }

  /** Picks the agent stream for a dial, or fails it at once with the reason. */
  private startDial(address: string, opts: DialOptions, caller: DialCaller): void {
    const fail = (code: DialFailureReason, message: string): void => caller.reject(this.dials.failure(code, message, 2, { dialAddress: address }));
    if (this.stopped) return fail('YT_ERR_TUNNEL_CLOSED', `tunnel server is shutting down; cannot dial ${address}`);
    const bad = checkDialAddress(address);
    if (bad !== undefined) return fail('YT_ERR_BAD_ADDRESS', bad);
    if (opts.signal?.aborted === true) return fail('YT_ERR_DIAL_CANCELLED', `dial to ${address} was cancelled before it started`);

    const host = removePortFromHost(opts.proxyHost ?? address);
    const backend = this.registry.pick(this.strategies, host);
    if (backend === undefined) {
      const via = opts.proxyHost !== undefined ? ` (X-Tunnel-Proxy-Host ${opts.proxyHost})` : '';
      return fail(
        'YT_ERR_NO_AGENT',
        `no agent serves ${host}${via}: none of the ${this.registry.agentCount} connected agents matches it ` +
          `(proxy strategy ${this.strategies.join(',')}); is the node's yurt-tunnel-agent running and connected?`,
      );
    }
    const loop = this.loopCheck?.(address, backend);
    if (loop !== undefined) return fail('YT_ERR_DIAL_LOOP', loop);
    const waiting = this.pendingDialsOf(backend.agentID);
    if (waiting >= this.maxPendingDialsPerAgent) {
      return fail(
        'YT_ERR_TOO_MANY_DIALS',
        `agent ${backend.agentID} already has ${waiting} dials waiting for an answer (limit ${this.maxPendingDialsPerAgent}, ` +
          'the server flag --max-pending-dials-per-agent); retry later',
      );
    }
    this.dials.send(backend, address, opts.timeoutMs ?? this.dialTimeoutMs, opts.signal, caller);
  }

  // ------------------------------------------------------------ agents

  /**
   * Registers an agent stream (sessions.admit does, for every call the
   * endpoint admits); its packets come to `handlePacket(backend, p)`, its end
   * to `detachAgent(backend, end)`.
   */
  attachAgent(info: BackendInfo, link: AgentLink): Backend {
    const backend = new Backend(info, link, this.maxUnknownPacketsPerAgent);
    if (this.stopped) {
      link.close({ kind: 'shutdown', message: 'tunnel server is shutting down' });
      backend.closed = true;
      return backend;
    }
    backend.duplicateProbe = info.probe === true && this.registry.streamsOf(info.agentID).some((b) => !b.suspended && !b.draining);
    this.registry.add(backend);
    this.lifecycleLog(backend, 'agent connected', {
      agentID: info.agentID,
      stream: backend.serial,
      remoteAddress: info.remoteAddress,
      identity: info.certSubject,
      flowControl: info.flow !== undefined,
      halfClose: info.halfClose === true,
      agentStreams: this.registry.streamsOf(info.agentID).length,
      ...(backend.duplicateProbe ? { probe: true } : {}),
    });
    return backend;
  }

  /** An agent stream's coming and going: at -v 0, but at -v 2 for an agent's probe of a server it already holds. */
  private lifecycleLog(backend: Backend, message: string, fields: Record<string, unknown>): void {
    if (backend.duplicateProbe) this.log.verbose(2, message, fields);
    else this.log.info(message, fields);
  }

  /**
   * `old`, a link of the same agent as `backend` that carries a session, will
   * not come back: its process is gone and `backend` is its successor's. Its
   * session ends as one whose window passed does (its connections fail with
   * YT_ERR_AGENT_LOST) instead of holding its callers for the rest of the
   * window; the dials waiting in it, which the old process never answered and
   * for which nothing reached the target yet, go to `backend` (the same node),
   * deadlines unchanged.
   */
  endReplaced(old: Backend, backend: Backend): void {
    if (old.closed || backend.closed || old.session === undefined || old === backend) return;
    const moved = this.dials.moveAll(old, backend);
    this.sessions.expireReplaced(old);
    const dials = moved.resend();
    if (dials > 0) this.log.info('dials waiting for the agent sent to its new link', { agentID: backend.agentID, stream: backend.serial, dials });
  }

  /** The agent's stream ended: fail its pending dials and close its connections at once. */
  detachAgent(backend: Backend, end: AgentLinkEnd): void {
    if (backend.closed) return;
    backend.closed = true;
    this.registry.remove(backend);
    const session = backend.session;
    this.sessions.ended(backend);
    const ended = this.dials.endAllOf(backend, end);
    const lost = end.kind === 'lost';
    backend.sessionLink?.resumable.close(lost ? new AgentLostError(end.message) : new ConnectionClosedError(end.message));
    this.lifecycleLog(backend, 'agent disconnected', {
      agentID: backend.agentID,
      stream: backend.serial,
      ended: end.kind,
      reason: end.message,
      failedDials: ended.dials,
      closedConnections: ended.conns,
      ...(session !== undefined ? { resumes: session.resumes } : {}),
      ...(backend.duplicateProbe ? { probe: true } : {}),
    });
  }

  handlePacket(backend: Backend, p: Packet): void {
    if (backend.closed) return;
    this.metrics.packetReceived(p.type);
    if (this.log.enabled(4)) this.log.verbose(4, 'packet from agent', { agentID: backend.agentID, ...describePacket(p) });
    const type = p.type;
    switch (type) {
      case 'DATA': {
        const conn = backend.conns.get(p.connectID);
        if (conn !== undefined) {
          conn.deliver(p.data);
        } else if (!backend.conns.isTombstoned(p.connectID)) {
          // Upstream behaviour: tell the agent to close what nobody reads.
          backend.send({ type: 'CLOSE_REQ', connectID: p.connectID });
          this.unknownPacket(backend, p.type, { connectID: p.connectID.toString() });
        }
        return;
      }
      case 'DIAL_RSP':
        this.dials.answered(backend, p.random, p.connectID, p.error);
        return;
      case 'CLOSE_RSP':
        this.onCloseResponse(backend, p);
        return;
      case 'DIAL_CLS':
        this.dials.cancelledByAgent(backend, p.random);
        return;
      case 'DRAIN':
        this.onDrain(backend);
        return;
      case 'WINDOW_UPDATE':
        if (backend.flow !== undefined) {
          backend.conns.get(p.connectID)?.grantCredit(Number(p.bytes));
          return;
        }
        this.limited.warn('ignoring WINDOW_UPDATE from an agent that did not negotiate flow control', { agentID: backend.agentID });
        return;
      case 'CLOSE_WRITE':
        if (backend.halfClose) {
          backend.conns.get(p.connectID)?.remoteEndWrite();
          return;
        }
        this.limited.warn('ignoring CLOSE_WRITE from an agent that did not negotiate half-close', { agentID: backend.agentID });
        return;
      case 'DIAL_REQ':
      case 'CLOSE_REQ':
      case 'UNKNOWN':
        this.limited.warn('ignoring a packet agents do not send', { agentID: backend.agentID, ...describePacket(p) });
        return;
      default:
        this.limited.warn('ignoring a packet of a type the server does not know', { agentID: backend.agentID, packetType: unhandledPacketType(type) });
    }
  }

  /** The agent closed a connection; an error in the packet is a failure the caller must see as one. */
  private onCloseResponse(backend: Backend, p: Extract<Packet, { type: 'CLOSE_RSP' }>): void {
    const conn = backend.conns.get(p.connectID);
    if (conn !== undefined) {
      // An error is a failure (the target reset the connection, the agent cut it): the caller must see it as one.
      conn.remoteClose(
        p.error === '' ? undefined : new ConnectionClosedError(`agent ${backend.agentID} ended the connection to ${conn.address} with an error: ${p.error}`),
      );
      backend.conns.remove(conn);
    } else if (!backend.conns.takeTombstone(p.connectID)) {
      this.unknownPacket(backend, p.type, { connectID: p.connectID.toString() });
    }
  }

  private onDrain(backend: Backend): void {
    if (backend.draining) return;
    backend.draining = true;
    this.log.info('agent is draining; new dials go elsewhere when possible', {
      agentID: backend.agentID,
      stream: backend.serial,
    });
  }

  /**
   * A packet for a connection (or dial) the agent does not hold here: logged
   * (a few lines per interval) and counted; past the limit the agent's stream
   * is ended, telling it why, and its other connections close with it.
   */
  private unknownPacket(backend: Backend, type: 'DATA' | 'DIAL_RSP' | 'CLOSE_RSP', ids: Record<string, string>): void {
    this.metrics.unknownConnectionPacket(type);
    this.limited.verbose(2, 'packet for a connection the agent does not hold', { agentID: backend.agentID, packetType: type, ...ids });
    const count = backend.unknownPackets.add();
    if (count === 0) return;
    const limit = backend.unknownPackets.limit;
    const message =
      `agent ${backend.agentID} sent ${count} packets for connections it does not hold within ${UNKNOWN_PACKET_WINDOW_MS} ms ` +
      `(limit ${limit}, the server flag --max-unknown-packets-per-agent); the server closed its stream`;
    this.metrics.agentCutOff('unknown_connection_packets');
    this.log.warn('agent cut off: too many packets for connections it does not hold', {
      agentID: backend.agentID,
      stream: backend.serial,
      packets: count,
      windowMs: UNKNOWN_PACKET_WINDOW_MS,
      limit,
    });
    const end = { kind: 'cut-off', message } as const;
    this.detachAgent(backend, end);
    backend.link.close(end);
  }

  // ------------------------------------------------------------ state

  get pendingDialCount(): number {
    return this.dials.size;
  }

  /** Dials pending on every stream of `agentID`. */
  private pendingDialsOf(agentID: string): number {
    let n = 0;
    for (const b of this.registry.streamsOf(agentID)) n += b.pendingDialCount;
    return n;
  }

  establishedCount(): number {
    let n = 0;
    for (const b of this.registry.all()) n += b.conns.size;
    return n;
  }

  /** Resolves true once no connection is open and no dial pending, false if `ms` passes first. */
  whenIdle(ms: number): Promise<boolean> {
    return this.idle.wait(ms);
  }

  /** True when the first strategy can route somewhere (readiness, as upstream). */
  get ready(): boolean {
    return this.registry.readyFor(this.strategies[0]!);
  }

  /**
   * Fails every pending dial, closes every connection and ends every agent
   * stream. Idempotent: a second call waits for the first.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.stopped = true;
    this.sessions.close();
    clearInterval(this.sweepTimer);
    this.limited.flush();
    this.dials.failAll();
    const end = { kind: 'shutdown', message: 'tunnel server is shutting down' } as const;
    for (const b of this.registry.all()) {
      this.detachAgent(b, end);
      b.link.close(end);
    }
  }
}
