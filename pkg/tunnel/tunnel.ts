// The tunnel server's core: the packet switch between callers of `dial()` and
// agent streams. It knows nothing about HTTP, gRPC transport or Kubernetes:
// an agent's stream is an AgentLink, and it ends with an AgentLinkEnd.

import { addAbortListener } from 'node:events';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { classifyAgentDialError } from '../protocol/dial-errors.js';
import { AgentLostError, ConnectionClosedError, DialError, type DialFailureReason, type ResumeError } from '../protocol/errors.js';
import { parseSessionToken, type SessionClaim } from '../protocol/resume.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import { newDialID } from '../protocol/ids.js';
import { describePacket, unhandledPacketType, type Packet } from '../protocol/packet.js';
import { DEFAULT_RESUME_MEMORY_BUDGET, ResumeBudget } from '../mux/resume-budget.js';
import { IdleWaiters } from '../timers/idle.js';
import { endsWithoutGoodbye, type AgentLink, type AgentLinkEnd } from './agent-link.js';
import { Backend, type BackendInfo } from './backend.js';
import { BackendRegistry, type ProxyStrategy } from './backend-registry.js';
import { recordConnectionEnd } from './connection-end.js';
import { TunnelMetrics } from './metrics.js';
import { PendingDials, type PendingDial } from './pending-dials.js';
import { TunnelConn } from './tunnel-conn.js';
import { TunnelRelay } from './tunnel-relay.js';
import { checkDialAddress, DEFAULT_MAX_PENDING_DIALS_PER_AGENT, type DialOptions, type TunnelOptions } from './options.js';
import { DEFAULT_MAX_UNKNOWN_PACKETS, UNKNOWN_PACKET_WINDOW_MS } from './unknown-packets.js';
import { ResumeMetrics, type SessionExpiry } from './resume-metrics.js';
import { SessionLink } from './session-link.js';
import { sameOwner, SessionTable, type Session, type SessionOwner } from './session-table.js';

const TOMBSTONE_SWEEP_MS = 10_000;

export class Tunnel {
  readonly registry = new BackendRegistry();
  readonly metrics: TunnelMetrics;
  /** Resumable agent sessions (session resume), by token. */
  readonly sessions: SessionTable<Backend>;
  readonly resumeMetrics: ResumeMetrics;
  /** What the resumable links keep for their agents, together (--resume-memory-budget). */
  readonly resumeBudget: ResumeBudget;
  /** Packets and bytes resent by sessions that have ended. */
  private endedResent = { packets: 0, bytes: 0 };
  private readonly pending = new PendingDials();
  private readonly strategies: readonly ProxyStrategy[];
  private readonly dialTimeoutMs: number;
  private readonly connHighWaterMark: number | undefined;
  private readonly lingerAfterEndMs: number;
  private readonly stalledConnectionTimeoutMs: number;
  private readonly maxPendingDialsPerAgent: number;
  private readonly maxUnknownPacketsPerAgent: number;
  private readonly loopCheck: TunnelOptions['loopCheck'];
  private readonly log: Logger;
  private readonly limited: LogLimiter;
  private readonly sweepTimer: NodeJS.Timeout;
  private readonly newDialID: () => bigint;
  /** Whoever waits for the last connection and dial to end (a graceful shutdown). */
  private readonly idle = new IdleWaiters(() => this.establishedCount() + this.pending.size);
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(opts: TunnelOptions = {}) {
    this.strategies = opts.strategies ?? ['destHost'];
    if (this.strategies.length === 0) throw new TypeError('at least one proxy strategy is required');
    this.dialTimeoutMs = opts.dialTimeoutMs ?? 10_000;
    this.connHighWaterMark = opts.connHighWaterMark;
    this.lingerAfterEndMs = opts.lingerAfterEndMs ?? 60_000;
    this.stalledConnectionTimeoutMs = opts.stalledConnectionTimeoutMs ?? 5000;
    this.maxPendingDialsPerAgent = opts.maxPendingDialsPerAgent ?? DEFAULT_MAX_PENDING_DIALS_PER_AGENT;
    this.maxUnknownPacketsPerAgent = opts.maxUnknownPacketsPerAgent ?? DEFAULT_MAX_UNKNOWN_PACKETS;
    this.loopCheck = opts.loopCheck;
    this.log = opts.logger ?? silentLogger();
    this.limited = new LogLimiter(this.log);
    this.newDialID = opts.newDialID ?? newDialID;
    this.metrics = new TunnelMetrics(
      {
        backends: () => this.registry.all().length,
        agents: () => this.registry.agentCount,
        pendingDials: () => this.pending.size,
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
    this.resumeBudget = new ResumeBudget(opts.resumeMemoryBudget ?? DEFAULT_RESUME_MEMORY_BUDGET, { onExhausted: () => this.expireForBudget() });
    this.sessions = new SessionTable<Backend>({ onExpire: (s, suspendedForMs, reason) => this.expireSession(s.value, reason, suspendedForMs) });
    this.resumeMetrics = new ResumeMetrics(this.metrics.registry, {
      suspended: () => this.sessions.suspendedCount,
      resent: () => {
        const sum = { ...this.endedResent };
        for (const b of this.registry.all()) {
          const r = b.sessionLink?.resumable;
          if (r === undefined) continue;
          sum.packets += r.resentPackets;
          sum.bytes += r.resentBytes;
        }
        return sum;
      },
      budget: () => ({ used: this.resumeBudget.used, limit: this.resumeBudget.limit, waits: this.resumeBudget.waits }),
    });
    this.sweepTimer = setInterval(() => {
      for (const b of this.registry.all()) b.conns.sweep();
    }, TOMBSTONE_SWEEP_MS);
    this.sweepTimer.unref();
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
    return new Promise((resolve, reject) => this.startDial(address, opts, opts.relay === true, resolve, reject));
  }

  /** Whether a connected agent serves `host` under the proxy strategies (what a dial to it would pick). */
  serves(host: string): boolean {
    return this.registry.pick(this.strategies, host) !== undefined;
  }

  private startDial(address: string, opts: DialOptions, relay: boolean, resolve: (conn: TunnelConn | TunnelRelay) => void, reject: (err: Error) => void): void {
    const fail = (code: DialFailureReason, message: string): void => reject(this.dialFailure(code, message, 2, { dialAddress: address }));
    if (this.closed) return fail('YT_ERR_TUNNEL_CLOSED', `tunnel server is shutting down; cannot dial ${address}`);
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

    let random = this.newDialID();
    while (this.pending.has(random)) random = this.newDialID();
    const timeoutMs = opts.timeoutMs ?? this.dialTimeoutMs;

    const dial: PendingDial = { random, backend, address, startedAt: performance.now(), relay, resolve, reject };
    dial.timer = setTimeout(() => {
      this.failDial(random, 'YT_ERR_DIAL_TIMEOUT', `agent ${backend.agentID} did not answer the dial to ${address} within ${timeoutMs} ms`, true);
    }, timeoutMs);
    dial.timer.unref();
    if (opts.signal !== undefined) {
      dial.abortListener = addAbortListener(opts.signal, () => {
        this.failDial(random, 'YT_ERR_DIAL_CANCELLED', `dial to ${address} was cancelled by the caller`, true);
      });
    }
    this.pending.add(dial);
    if (this.log.enabled(3)) {
      this.log.verbose(3, 'dialing', { agentID: backend.agentID, dialAddress: address, dialID: random.toString() });
    }
    const sent = backend.send({ type: 'DIAL_REQ', protocol: 'tcp', address, random });
    if (!sent) {
      this.failDial(random, 'YT_ERR_AGENT_GONE', `agent ${backend.agentID} disconnected before the dial to ${address} could be sent`, false);
    }
  }

  /** Fails a pending dial, if it is still pending; optionally tells the agent with DIAL_CLS. */
  private failDial(random: bigint, code: DialFailureReason, message: string, tellAgent: boolean): void {
    const dial = this.pending.take(random);
    if (dial === undefined) return;
    if (tellAgent && !dial.backend.closed) {
      dial.backend.send({ type: 'DIAL_CLS', random });
      dial.backend.unknownPackets.dialAbandoned();
    }
    this.failPending(dial, code, message, code === 'YT_ERR_DIAL_CANCELLED' ? 3 : 1);
  }

  /**
   * Settles a dial taken from the pending table as failed: counted by reason,
   * logged at `verbosity` (none: the caller logs the whole batch), rejected.
   */
  private failPending(dial: PendingDial, code: DialFailureReason, message: string, verbosity?: number, fields: Record<string, unknown> = {}): void {
    const where = { agentID: dial.backend.agentID, dialAddress: dial.address, dialID: dial.random.toString() };
    dial.reject(this.dialFailure(code, message, verbosity, { ...where, ...fields }));
    this.idle.check();
  }

  /** A dial that produced no connection: the metric, the log line, the error for its caller. */
  private dialFailure(code: DialFailureReason, message: string, verbosity: number | undefined, fields: Record<string, unknown>): DialError {
    this.metrics.dialFailed(code);
    if (verbosity !== undefined) this.log.verbose(verbosity, 'dial failed', { reason: code, error: message, ...fields });
    return new DialError(code, message);
  }

  // ------------------------------------------------------------ agents

  /**
   * Registers an agent stream. The caller wires the link's packets to
   * `handlePacket(backend, p)` and its end to `detachAgent(backend, reason)`.
   */
  attachAgent(info: BackendInfo, link: AgentLink): Backend {
    const backend = new Backend(info, link, this.maxUnknownPacketsPerAgent);
    if (this.closed) {
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
   * Registers an agent stream whose session may outlive it (session resume):
   * its packets go through a SessionLink, and the token that takes it back
   * goes to the agent (never to a log). The caller wires the call's packets
   * to `receive(backend, call, p)` and its end to `linkEnded(backend, call, end)`.
   */
  attachResumableAgent(info: BackendInfo, call: AgentLink, owner: SessionOwner, windowMs: number): { backend: Backend; token: string } {
    let backend: Backend | undefined;
    const link = new SessionLink(
      {
        onPacket: (p) => this.handlePacket(backend!, p),
        onBroken: (err) => this.breakSession(backend!, err),
      },
      this.resumeBudget,
    );
    backend = this.attachAgent(info, link);
    const { session, token } = this.sessions.open(owner, windowMs, backend);
    backend.session = session;
    backend.sessionLink = link;
    link.attach(call, 0);
    if (backend.closed) this.sessions.end(session);
    return { backend, token };
  }

  /** A packet the call `from` delivered for `backend`. */
  receive(backend: Backend, from: AgentLink, p: Packet): void {
    const link = backend.sessionLink;
    if (link !== undefined) link.receive(from, p);
    else this.handlePacket(backend, p);
  }

  /**
   * The call `from` of `backend` ended. With a session, a failure suspends it
   * (its connections wait for the agent for the window) and a call that no
   * longer carries the session (a resume superseded it) changes nothing.
   */
  linkEnded(backend: Backend, from: AgentLink, end: AgentLinkEnd): void {
    const link = backend.sessionLink;
    if (link === undefined) {
      this.detachAgent(backend, end);
      return;
    }
    if (backend.closed || link.transport !== from) return;
    if (endsWithoutGoodbye(end) && !backend.draining && !this.closed && backend.session !== undefined) {
      this.suspendAgent(backend, end);
      return;
    }
    this.detachAgent(backend, end);
  }

  private suspendAgent(backend: Backend, end: AgentLinkEnd): void {
    backend.sessionLink!.detach();
    backend.suspendReason = end.message;
    this.sessions.suspend(backend.session!);
    this.resumeMetrics.linkSuspended();
    // With the budget spent, what this session keeps may be what the live links wait for.
    this.resumeBudget.recheck();
    this.log.info('agent link dropped; keeping its connections for the resume window', {
      agentID: backend.agentID,
      stream: backend.serial,
      reason: end.message,
      connections: backend.conns.size,
      pendingDials: backend.pendingDialCount,
      windowMs: backend.session!.windowMs,
    });
  }

  /**
   * `backend`, a new link of `owner`, took back none of the agent's sessions
   * suspended here (`claims`, what its call presented, names none of them).
   * A live agent presents a claim for every session it waits to resume
   * (pkg/agent/client-set.ts), so the process that held them is gone (killed
   * and started again): none can come back, and each ends now (endReplaced).
   * (A live agent that probes before it notices its link dropped would lose
   * the session too; its liveness watch notices within about half the window,
   * a probe comes every 30 s.)
   */
  endSessionsLeftBehind(backend: Backend, owner: SessionOwner, claims: readonly SessionClaim[]): void {
    const suspended = this.sessions.suspendedOf(owner.agentID);
    if (suspended.length === 0) return;
    const claimed = new Set(claims.map((c) => parseSessionToken(c.token)?.id));
    for (const session of suspended) {
      if (!claimed.has(session.id) && sameOwner(session.owner, owner)) this.endReplaced(session.value, backend);
    }
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
    const session = old.session;
    if (old.closed || backend.closed || session === undefined || old === backend) return;
    const dials = this.pending.moveAll(old, backend);
    if (!this.sessions.expireEarly(session, 'agent_restarted')) this.expireSession(old, 'agent_restarted');
    for (const d of dials) {
      if (!backend.send({ type: 'DIAL_REQ', protocol: 'tcp', address: d.address, random: d.random })) {
        this.failDial(d.random, 'YT_ERR_AGENT_GONE', `agent ${backend.agentID} disconnected before the dial to ${d.address} could be sent`, false);
      }
    }
    if (dials.length > 0) {
      this.log.info('dials waiting for the agent sent to its new link', { agentID: backend.agentID, stream: backend.serial, dials: dials.length });
    }
  }

  /**
   * The first half of a resume, before the answer goes out: the claim's count
   * is checked (a session that cannot resume from it ends, and undefined is
   * returned: the call is a fresh link), and a call still carrying the
   * session (a silent blip the server never noticed) is detached and returned
   * for the caller to drop. `received` is what the answer tells the agent.
   */
  prepareResume(session: Session<Backend>, claim: SessionClaim): { received: number; superseded: AgentLink | undefined } | undefined {
    const backend = session.value;
    const link = backend.sessionLink;
    if (backend.closed || link === undefined) return undefined;
    if (!link.resumable.canResume(claim.received)) {
      this.expireSession(backend, 'YT_ERR_RESUME_BAD_COUNT');
      return undefined;
    }
    const superseded = link.detach();
    return { received: link.received, superseded };
  }

  /** The second half: `call` carries the session from now on; what the agent lacks is resent. */
  completeResume(
    session: Session<Backend>,
    claim: SessionClaim,
    call: AgentLink,
    where: { remoteAddress: string; roundTripMs: () => number | undefined; owner?: SessionOwner; certSubject?: string },
  ): Backend {
    const backend = session.value;
    const link = backend.sessionLink!;
    const suspendedAt = session.suspendedAt;
    this.sessions.take(session, claim.attempt);
    // A renewed certificate (the table let it take the session): the session is bound to it from now on.
    const certificateRenewed = where.owner !== undefined && where.owner.fingerprint !== session.owner.fingerprint;
    if (where.owner !== undefined) session.owner.fingerprint = where.owner.fingerprint;
    if (where.certSubject !== undefined) backend.certSubject = where.certSubject;
    const before = { packets: link.resumable.resentPackets, bytes: link.resumable.resentBytes };
    link.attach(call, claim.received);
    backend.remoteAddress = where.remoteAddress;
    backend.roundTripMs = where.roundTripMs;
    backend.suspendReason = undefined;
    this.resumeMetrics.sessionResumed();
    this.log.info('agent link resumed', {
      agentID: backend.agentID,
      stream: backend.serial,
      suspendedForMs: suspendedAt === undefined ? 0 : Date.now() - suspendedAt,
      resumes: session.resumes,
      resentPackets: link.resumable.resentPackets - before.packets,
      resentBytes: link.resumable.resentBytes - before.bytes,
      remoteAddress: where.remoteAddress,
      certificateRenewed,
    });
    return backend;
  }

  /**
   * The resume budget is spent: suspended sessions' data cannot be
   * acknowledged (no transport), so while they keep some of it every live
   * link may be waiting on them. Expires those holding data, longest
   * suspended first (the least of its window is lost), until there is room.
   * Live links are never expired here: they wait.
   */
  private expireForBudget(): void {
    for (const session of this.sessions.suspendedOldestFirst()) {
      if (!this.resumeBudget.exhausted) return;
      const held = session.value.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
      if (held > 0) this.sessions.expireEarly(session, 'YT_ERR_RESUME_BUDGET');
    }
  }

  /** A session that will not be resumed: its connections and dials end with YT_ERR_AGENT_LOST. */
  private expireSession(backend: Backend, reason: SessionExpiry, suspendedForMs = suspendedFor(backend)): void {
    if (backend.closed) return;
    const windowMs = backend.session?.windowMs ?? 0;
    const heldBytes = backend.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
    let message: string;
    if (reason === 'window') {
      message = `agent ${backend.agentID}'s link dropped (${backend.suspendReason ?? 'no reason known'}) and did not come back within the ${windowMs} ms resume window`;
    } else if (reason === 'YT_ERR_RESUME_BUDGET') {
      message =
        `agent ${backend.agentID}'s link dropped (${backend.suspendReason ?? 'no reason known'}) and its session was expired early: ` +
        `the server's resume memory (--resume-memory-budget, ${this.resumeBudget.limit} bytes) was spent, and this was the oldest ` +
        `suspended session holding some (${heldBytes} bytes)`;
    } else if (reason === 'agent_restarted') {
      const link = backend.suspendReason === undefined ? 'link gave no sign of life' : `link dropped (${backend.suspendReason})`;
      message =
        `agent ${backend.agentID}'s ${link} and a new agent process connected without claiming its session: ` +
        'the old process is gone, and its connections with it';
    } else {
      message = `agent ${backend.agentID}'s session cannot be resumed (${reason})`;
    }
    this.resumeMetrics.sessionExpired(reason);
    // Many at once when a caller fills the budget while many agents are away: those lines are limited.
    const log = reason === 'YT_ERR_RESUME_BUDGET' ? this.limited : this.log;
    log.warn('agent session expired; closing its connections', {
      agentID: backend.agentID,
      stream: backend.serial,
      reason,
      suspendedForMs: suspendedForMs ?? null,
      connections: backend.conns.size,
      pendingDials: backend.pendingDialCount,
      heldBytes,
    });
    const end = { kind: 'lost', message } as const;
    this.detachAgent(backend, end);
    backend.link.close({ kind: 'shutdown', message });
  }

  /** The agent broke the session's numbering (a count it cannot have): end it, and the call. */
  private breakSession(backend: Backend, err: ResumeError): void {
    if (backend.closed) return;
    this.resumeMetrics.sessionExpired(err.code === 'YT_ERR_RESUME_BAD_CLAIM' ? 'YT_ERR_RESUME_BAD_COUNT' : err.code);
    const end = { kind: 'cut-off', message: `agent ${backend.agentID} broke its session: ${err.message}` } as const;
    this.detachAgent(backend, end);
    backend.link.close(end);
  }

  /** The agent's stream ended: fail its pending dials and close its connections at once. */
  detachAgent(backend: Backend, end: AgentLinkEnd): void {
    if (backend.closed) return;
    backend.closed = true;
    this.registry.remove(backend);
    const session = backend.session;
    if (session !== undefined) {
      this.sessions.end(session);
      const r = backend.sessionLink!.resumable;
      this.endedResent.packets += r.resentPackets;
      this.endedResent.bytes += r.resentBytes;
    }
    const reason = end.message;
    const lost = end.kind === 'lost';
    const dials = this.pending.takeAllFor(backend);
    for (const d of dials) {
      if (lost) this.failPending(d, 'YT_ERR_AGENT_LOST', `dial to ${d.address} failed: ${reason}`);
      else this.failPending(d, 'YT_ERR_AGENT_GONE', `agent ${backend.agentID} disconnected while dialing ${d.address}: ${reason}`);
    }
    const conns = backend.conns.takeAll();
    for (const c of conns) c.remoteClose(lost ? new AgentLostError(reason) : new ConnectionClosedError(`agent ${backend.agentID} disconnected: ${reason}`));
    backend.sessionLink?.resumable.close(lost ? new AgentLostError(reason) : new ConnectionClosedError(reason));
    this.lifecycleLog(backend, 'agent disconnected', {
      agentID: backend.agentID,
      stream: backend.serial,
      ended: end.kind,
      reason,
      failedDials: dials.length,
      closedConnections: conns.length,
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
        this.onDialResponse(backend, p.random, p.connectID, p.error);
        return;
      case 'CLOSE_RSP':
        this.onCloseResponse(backend, p);
        return;
      case 'DIAL_CLS':
        this.failDialFromAgent(backend, p.random);
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

  private onDialResponse(backend: Backend, random: bigint, connectID: bigint, error: string): void {
    const dial = this.pending.get(random);
    if (dial === undefined || dial.backend !== backend) {
      // Late (timed out, cancelled) or foreign: do not leave the agent holding a connection.
      if (connectID !== 0n) backend.send({ type: 'CLOSE_REQ', connectID });
      if (!backend.unknownPackets.takeLateAnswer()) {
        this.unknownPacket(backend, 'DIAL_RSP', { dialID: random.toString(), connectID: connectID.toString() });
      }
      return;
    }
    this.pending.take(random);
    if (error !== '' || connectID === 0n) {
      const reason = error === '' ? 'YT_ERR_DIAL_FAILED' : classifyAgentDialError(error);
      const verb = reason === 'YT_ERR_DIAL_DENIED' ? 'refused to dial' : 'could not dial';
      const message = `agent ${backend.agentID} ${verb} ${dial.address}: ${error === '' ? 'answered without a connection ID' : error}`;
      this.failPending(dial, reason, message, 1, { error });
      return;
    }
    const connOpts = {
      highWaterMark: this.connHighWaterMark,
      flow: backend.flow,
      halfClose: backend.halfClose,
      lingerAfterEndMs: this.lingerAfterEndMs,
      stallTimeoutMs: this.stalledConnectionTimeoutMs,
    };
    let conn: TunnelConn | TunnelRelay;
    if (dial.relay) {
      const relay = new TunnelRelay(backend, connectID, dial.address, connOpts);
      relay.onClose = (err) => this.connectionClosed(backend, relay, err ?? null);
      conn = relay;
    } else {
      const duplex = new TunnelConn(backend, connectID, dial.address, connOpts);
      duplex.once('close', () => this.connectionClosed(backend, duplex, duplex.errored));
      conn = duplex;
    }
    backend.conns.add(conn);
    // The caller answers its client first; the bookkeeping can wait that long.
    dial.resolve(conn);
    this.metrics.dialSucceeded((performance.now() - dial.startedAt) / 1000);
    if (this.log.enabled(3)) {
      this.log.verbose(3, 'connection established', {
        agentID: backend.agentID,
        dialAddress: dial.address,
        dialID: random.toString(),
        connectID: connectID.toString(),
      });
    }
  }

  /** A connection is over: out of the table, counted and logged. */
  private connectionClosed(backend: Backend, conn: TunnelConn | TunnelRelay, err: Error | null): void {
    backend.conns.remove(conn);
    backend.endedBytes.toAgent += conn.bytesSent;
    backend.endedBytes.fromAgent += conn.bytesReceived;
    this.idle.check();
    recordConnectionEnd(conn, err, this.metrics, this.log);
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

  private failDialFromAgent(backend: Backend, random: bigint): void {
    const dial = this.pending.get(random);
    if (dial === undefined || dial.backend !== backend) return;
    this.failDial(random, 'YT_ERR_DIAL_FAILED', `agent ${backend.agentID} cancelled the dial to ${dial.address}`, false);
  }

  // ------------------------------------------------------------ state

  get pendingDialCount(): number {
    return this.pending.size;
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
    this.closed = true;
    this.sessions.close();
    clearInterval(this.sweepTimer);
    this.limited.flush();
    for (const d of this.pending.takeAll()) {
      this.failPending(d, 'YT_ERR_TUNNEL_CLOSED', `tunnel server is shutting down; the dial to ${d.address} was abandoned`);
    }
    const end = { kind: 'shutdown', message: 'tunnel server is shutting down' } as const;
    for (const b of this.registry.all()) {
      this.detachAgent(b, end);
      b.link.close(end);
    }
  }
}

/** How long the agent's session has been suspended, if it is. */
function suspendedFor(backend: Backend): number | undefined {
  const since = backend.session?.suspendedAt;
  return since === undefined ? undefined : Date.now() - since;
}
