// Session resume on the server, behind one seam (proto/yurttunnel_ext.proto,
// docs/protocol.md): the tokens (session-table.ts), a session's packet link
// that outlives the agent's calls (session-link.ts over mux/resumable-link.ts),
// suspension, resend, expiry and the memory budget the links share.
//
// How a call goes through it. The agent endpoint (pkg/endpoint) only maps its
// transport to these steps:
//
//   claim(claims, owner)     what the call's session claims find; nothing
//                            changes. A call that takes a session back skips
//                            the stream limit (admission, in the endpoint).
//   refusal(claim, …)        claims not honoured are counted and logged; a
//                            stale attempt that found nothing refuses the call.
//   admit(call)              resume the session found (its count checked, the
//                            call still carrying it superseded), or open a
//                            fresh link, resumable when a window was agreed.
//                            `answer` sends the call's headers in between:
//                            before any packet goes on the call.
//   the AdmittedLink         each packet the call delivers goes one way: to
//                            the session's ResumableLink (numbered, taken only
//                            from the call carrying it) and on to the packet
//                            switch (Tunnel.handlePacket), or straight there
//                            without a session. When the call ends, a
//                            failure suspends the session for its window; a
//                            goodbye, a shutdown or a cut-off ends it.
//
// A suspended session expires when its window passes, when its agent's new
// process connects without claiming it (endLeftBehind, Tunnel.endReplaced),
// or when the budget is spent and it holds some of it: its connections then
// fail with YT_ERR_AGENT_LOST, as they do when a claim brings a count the
// session cannot resume from (the call then gets a fresh one). A session
// whose agent breaks the numbering on a live call is cut off with the call.

import type { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import type { Registry } from '../metrics/prom.js';
import { DEFAULT_RESUME_MEMORY_BUDGET, ResumeBudget } from '../mux/resume-budget.js';
import type { ResumeError } from '../protocol/errors.js';
import type { Packet } from '../protocol/packet.js';
import type { SessionClaim } from '../protocol/resume.js';
import { endsWithoutGoodbye, type AgentLink, type AgentLinkEnd } from './agent-link.js';
import type { Backend, BackendInfo } from './backend.js';
import { ResumeMetrics, type SessionExpiry } from './resume-metrics.js';
import { SessionLink } from './session-link.js';
import { sameOwner, SessionTable, type ClaimResolution, type SessionOwner } from './session-table.js';

/** What the sessions need of the tunnel they serve. */
export interface SessionHost {
  /** The tunnel is shutting down: a failed link is not suspended. */
  readonly closed: boolean;
  attachAgent(info: BackendInfo, link: AgentLink): Backend;
  detachAgent(backend: Backend, end: AgentLinkEnd): void;
  handlePacket(backend: Backend, p: Packet): void;
  /** `old`'s process is gone and `backend` is its successor's: its session ends, its dials move over. */
  endReplaced(old: Backend, backend: Backend): void;
}

/** What one call's claims found (claim()). */
export type Claim = ClaimResolution<Backend>;

/** The session part of a call's answer: the window, the token, and on a resume the server's count of packets received. */
export interface SessionAnswer {
  windowMs: number;
  token: string;
  received?: number;
}

/** An admitted agent call, as the sessions see it. */
export interface AgentCall {
  link: AgentLink;
  info: BackendInfo;
  owner: SessionOwner;
  /** The resume window agreed with the agent; undefined: the link is not resumable. */
  windowMs: number | undefined;
  claim: Claim | undefined;
  /**
   * Answers the call, once, before any packet goes on `link`: with the
   * session part (none without resume), and the call a resume takes the
   * session from if one still carried it (a silent blip: drop it).
   */
  answer(session: SessionAnswer | undefined, superseded: AgentLink | undefined): void;
}

/** A call carrying an agent link: where its packets go, and what its end does. */
export interface AdmittedLink {
  readonly backend: Backend;
  /** The call took a session back: its connections carry on. */
  readonly resumed: boolean;
  /** Each packet the call delivers. */
  readonly receive: (p: Packet) => void;
  /** The call ended, how. */
  readonly ended: (end: AgentLinkEnd) => void;
}

export interface SessionsOptions {
  log: Logger;
  limited: LogLimiter;
  registry: Registry;
  /** --resume-memory-budget */
  memoryBudget?: number;
}

export class Sessions {
  readonly table: SessionTable<Backend>;
  /** What the resumable links keep for their agents, together (--resume-memory-budget). */
  readonly budget: ResumeBudget;
  readonly metrics: ResumeMetrics;
  /** Packets and bytes resent by sessions that have ended. */
  private readonly endedResent = { packets: 0, bytes: 0 };
  private readonly log: Logger;
  private readonly limited: LogLimiter;

  constructor(
    private readonly host: SessionHost,
    opts: SessionsOptions,
  ) {
    this.log = opts.log;
    this.limited = opts.limited;
    this.budget = new ResumeBudget(opts.memoryBudget ?? DEFAULT_RESUME_MEMORY_BUDGET, { onExhausted: () => this.expireForBudget() });
    this.table = new SessionTable<Backend>({ onExpire: (s, suspendedForMs, reason) => this.expire(s.value, reason, suspendedForMs) });
    this.metrics = new ResumeMetrics(opts.registry, {
      suspended: () => this.table.suspendedCount,
      resent: () => {
        const sum = { ...this.endedResent };
        for (const s of this.table.all()) {
          const r = s.value.sessionLink?.resumable;
          if (r === undefined) continue;
          sum.packets += r.resentPackets;
          sum.bytes += r.resentBytes;
        }
        return sum;
      },
      budget: () => ({ used: this.budget.used, limit: this.budget.limit, waits: this.budget.waits }),
    });
  }

  /** Sessions held: live and suspended. */
  get size(): number {
    return this.table.size;
  }

  get suspendedCount(): number {
    return this.table.suspendedCount;
  }

  /** What the session claims of a call of `owner` find. Changes nothing. */
  claim(claims: readonly SessionClaim[], owner: SessionOwner): Claim {
    return this.table.resolve(claims, owner);
  }

  /**
   * Counts and logs the claims of an admitted call that are not honoured;
   * the message to refuse the call with when it must be (a stale attempt,
   * and no session found), else undefined.
   */
  refusal(claim: Claim, agentID: string, remoteAddress: string): string | undefined {
    for (const s of claim.foreign) {
      this.metrics.claimRefused('foreign_certificate');
      this.limited.warn('session token presented with another certificate or agentID; not honoured', {
        agentID,
        sessionOf: s.owner.agentID,
        sameAgentID: s.owner.agentID === agentID,
        session: s.id,
        remoteAddress,
      });
    }
    for (const s of claim.stale) {
      this.metrics.claimRefused('stale_attempt');
      this.limited.verbose(2, 'stale session resume attempt refused', { agentID, session: s.id, remoteAddress });
    }
    for (const ended of claim.ended) {
      // The agent came back too late: its connections are gone on this side; the call carries a fresh session.
      this.metrics.claimRefused(ended.how === 'expired' ? 'session_expired' : 'session_ended');
      this.limited.warn('session claim on a session that is over here; the agent gets a fresh one', {
        agentID,
        sessionOf: ended.agentID,
        session: ended.id,
        how: ended.how,
        endedMsAgo: Date.now() - ended.endedAt,
        remoteAddress,
      });
    }
    if (claim.found !== undefined || claim.stale.length === 0) return undefined;
    return 'stale resume attempt: a newer call has taken the session';
  }

  /** Carries an admitted call: the session its claim found, taken back, or a new link, resumable when a window was agreed. */
  admit(call: AgentCall): AdmittedLink {
    const found = call.claim?.found;
    const resumed = found === undefined ? undefined : this.resume(found.session.value, found.claim, call);
    if (resumed !== undefined) return resumed;
    if (call.windowMs === undefined) {
      const backend = this.host.attachAgent(call.info, call.link);
      call.answer(undefined, undefined);
      return { backend, resumed: false, receive: (p) => this.host.handlePacket(backend, p), ended: (end) => this.host.detachAgent(backend, end) };
    }
    let backend: Backend | undefined;
    const link = new SessionLink({ onPacket: (p) => this.host.handlePacket(backend!, p), onBroken: (err) => this.breakSession(backend!, err) }, this.budget);
    backend = this.host.attachAgent(call.info, link);
    const { session, token } = this.table.open(call.owner, call.windowMs, backend);
    backend.session = session;
    backend.sessionLink = link;
    link.attach(call.link, 0);
    if (backend.closed) this.table.end(session);
    call.answer({ windowMs: call.windowMs, token }, undefined);
    return this.carried(backend, call.link, false);
  }

  /**
   * Takes `backend`'s session back for `call`, or undefined when it cannot
   * resume from the claim's count (it ends) or is over: the call is then a
   * fresh link. The answer goes out before what the agent lacks is resent.
   */
  private resume(backend: Backend, claim: SessionClaim, call: AgentCall): AdmittedLink | undefined {
    const link = backend.sessionLink;
    const session = backend.session;
    if (backend.closed || link === undefined || session === undefined) return undefined;
    if (!link.resumable.canResume(claim.received)) {
      this.expire(backend, 'YT_ERR_RESUME_BAD_COUNT');
      return undefined;
    }
    const superseded = link.detach();
    call.answer({ windowMs: session.windowMs, token: claim.token, received: link.received }, superseded);
    const suspendedAt = session.suspendedAt;
    this.table.take(session, claim.attempt);
    // A renewed certificate (the table let it take the session): the session is bound to it from now on.
    const certificateRenewed = call.owner.fingerprint !== session.owner.fingerprint;
    session.owner.fingerprint = call.owner.fingerprint;
    backend.certSubject = call.info.certSubject;
    const before = { packets: link.resumable.resentPackets, bytes: link.resumable.resentBytes };
    link.attach(call.link, claim.received);
    backend.remoteAddress = call.info.remoteAddress;
    backend.roundTripMs = call.info.roundTripMs ?? (() => undefined);
    backend.suspendReason = undefined;
    this.metrics.sessionResumed();
    this.log.info('agent link resumed', {
      agentID: backend.agentID,
      stream: backend.serial,
      suspendedForMs: suspendedAt === undefined ? 0 : Date.now() - suspendedAt,
      resumes: session.resumes,
      resentPackets: link.resumable.resentPackets - before.packets,
      resentBytes: link.resumable.resentBytes - before.bytes,
      remoteAddress: call.info.remoteAddress,
      certificateRenewed,
    });
    return this.carried(backend, call.link, true);
  }

  /** A call carrying `backend`'s session: its packets count only while it carries it, and so does its end. */
  private carried(backend: Backend, call: AgentLink, resumed: boolean): AdmittedLink {
    const resumable = backend.sessionLink!.resumable;
    return { backend, resumed, receive: (p) => resumable.receive(call, p), ended: (end) => this.linkEnded(backend, call, end) };
  }

  /**
   * The call `from` of `backend` ended: a failure suspends the session (its
   * connections wait for the agent for the window); a call that no longer
   * carries it (a resume superseded it) changes nothing. A probe of a server
   * the agent holds, with nothing on it, just ends: the agent closes it at
   * once and never resumes it, so suspended it would only wait out the window
   * and then expire with a warning.
   */
  private linkEnded(backend: Backend, from: AgentLink, end: AgentLinkEnd): void {
    const link = backend.sessionLink!;
    if (backend.closed || link.transport !== from) return;
    const idleProbe = backend.duplicateProbe && backend.conns.size === 0 && backend.pendingDialCount === 0;
    if (endsWithoutGoodbye(end) && !idleProbe && !backend.draining && !this.host.closed && backend.session !== undefined) {
      this.suspend(backend, end);
      return;
    }
    this.host.detachAgent(backend, end);
  }

  private suspend(backend: Backend, end: AgentLinkEnd): void {
    backend.sessionLink!.detach();
    backend.suspendReason = end.message;
    this.table.suspend(backend.session!);
    this.metrics.linkSuspended();
    // With the budget spent, what this session keeps may be what the live links wait for.
    this.budget.recheck();
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
   * `backend`, a new link of `owner`, claims none of the agent's sessions and
   * is no probe. A live agent presents a claim for every session it waits to
   * resume (pkg/agent/client-set.ts), so the process that held the sessions
   * suspended here is gone (killed and started again): none can come back,
   * and each ends now (endReplaced).
   */
  endLeftBehind(backend: Backend, owner: SessionOwner): void {
    for (const session of this.table.suspendedOf(owner.agentID)) {
      if (sameOwner(session.owner, owner)) this.host.endReplaced(session.value, backend);
    }
  }

  /** `old`'s process is gone (Tunnel.endReplaced): its session ends now, as one whose window passed. */
  expireReplaced(old: Backend): void {
    if (!this.table.expireEarly(old.session!, 'agent_restarted')) this.expire(old, 'agent_restarted');
  }

  /** `backend`'s link is over (Tunnel.detachAgent): its session, if any, leaves the table; what it resent is kept in the count. */
  ended(backend: Backend): void {
    const session = backend.session;
    const link = backend.sessionLink;
    if (session === undefined || link === undefined) return;
    this.table.end(session);
    this.endedResent.packets += link.resumable.resentPackets;
    this.endedResent.bytes += link.resumable.resentBytes;
  }

  /**
   * The resume budget is spent: suspended sessions' data cannot be
   * acknowledged (no transport), so while they keep some of it every live
   * link may be waiting on them. Expires those holding data, longest
   * suspended first (the least of its window is lost), until there is room.
   * Live links are never expired here: they wait.
   */
  private expireForBudget(): void {
    for (const session of this.table.suspendedOldestFirst()) {
      if (!this.budget.exhausted) return;
      const held = session.value.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
      if (held > 0) this.table.expireEarly(session, 'YT_ERR_RESUME_BUDGET');
    }
  }

  /** A session that will not be resumed: its connections and dials end with YT_ERR_AGENT_LOST. */
  private expire(backend: Backend, reason: SessionExpiry, suspendedForMs = suspendedFor(backend)): void {
    if (backend.closed) return;
    const heldBytes = backend.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
    const message = this.expiryMessage(backend, reason, heldBytes);
    this.metrics.sessionExpired(reason);
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
    this.host.detachAgent(backend, { kind: 'lost', message });
    backend.link.close({ kind: 'shutdown', message });
  }

  private expiryMessage(backend: Backend, reason: SessionExpiry, heldBytes: number): string {
    const dropped = `link dropped (${backend.suspendReason ?? 'no reason known'})`;
    switch (reason) {
      case 'window':
        return `agent ${backend.agentID}'s ${dropped} and did not come back within the ${backend.session?.windowMs ?? 0} ms resume window`;
      case 'YT_ERR_RESUME_BUDGET':
        return (
          `agent ${backend.agentID}'s ${dropped} and its session was expired early: ` +
          `the server's resume memory (--resume-memory-budget, ${this.budget.limit} bytes) was spent, and this was the oldest ` +
          `suspended session holding some (${heldBytes} bytes)`
        );
      case 'agent_restarted': {
        const link = backend.suspendReason === undefined ? 'link gave no sign of life' : dropped;
        return `agent ${backend.agentID}'s ${link} and a new agent process connected without claiming its session: the old process is gone, and its connections with it`;
      }
      default:
        return `agent ${backend.agentID}'s session cannot be resumed (${reason})`;
    }
  }

  /** The agent broke the session's numbering (a count it cannot have): end it, and the call. */
  private breakSession(backend: Backend, err: ResumeError): void {
    if (backend.closed) return;
    this.metrics.sessionExpired(err.code === 'YT_ERR_RESUME_BAD_CLAIM' ? 'YT_ERR_RESUME_BAD_COUNT' : err.code);
    const end = { kind: 'cut-off', message: `agent ${backend.agentID} broke its session: ${err.message}` } as const;
    this.host.detachAgent(backend, end);
    backend.link.close(end);
  }

  /** Forgets every session and stops every timer (the tunnel is closing: it detaches every link). */
  close(): void {
    this.table.close();
  }
}

/** How long the agent's session has been suspended, if it is. */
function suspendedFor(backend: Backend): number | undefined {
  const since = backend.session?.suspendedAt;
  return since === undefined ? undefined : Date.now() - since;
}
