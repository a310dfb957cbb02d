// The resumable sessions of one server (session resume,
// proto/yurttunnel_ext.proto): a token per agent link, bound to the agentID and
// the client certificate of the call that opened it, and for a link that
// dropped without a goodbye, the timer that ends the session when its window
// passes. What a session carries (the agent's connections, its packet link)
// is the owner's `value`; this table only answers who may take it back, and when
// it expires.
//
// A token is "<id>.<secret>": the ID finds the session, the secret proves the
// right to it. Only a hash of the secret is kept, and it is compared in
// constant time, so neither memory nor timing gives it away. A token that is
// right but comes with another agentID, or with a certificate that is not the
// same identity (below), is "foreign": the session is not handed over, nor
// touched.
//
// Which certificate may take a session back: when the server's identity
// check verified that the certificate names the agentID (--agent-identity-check
// strict or agent-id), any certificate a trusted CA issued that names it is
// that agent's, as every new link already assumes; so an agent whose
// certificate was renewed during a blip resumes with the new one. When
// nothing ties agentID to the certificate (identity check none, where agents
// may share one certificate and claim any agentID), only the very
// certificate that opened the session (its SHA-256 fingerprint) may.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { SESSION_ID_BYTES, SESSION_SECRET_BYTES, parseSessionToken, type SessionClaim } from '../protocol/resume.js';
import type { SessionExpiry } from './resume-metrics.js';

/** Who opened (or presents a claim on) a session: the agentID, and the verified client certificate. */
export interface SessionOwner {
  agentID: string;
  /** SHA-256 fingerprint of the client certificate ('' if none). */
  fingerprint: string;
  /** The server's identity check verified that the certificate names agentID (not so with --agent-identity-check none). */
  identityVerified: boolean;
}

/**
 * Whether `caller` is the agent that owns a session: the same agentID, and
 * either the same certificate, or both certificates verified to name that
 * agentID (a certificate renewed for the same node).
 */
export function sameOwner(owner: SessionOwner, caller: SessionOwner): boolean {
  if (caller.agentID !== owner.agentID || caller.fingerprint === '' || owner.fingerprint === '') return false;
  if (caller.fingerprint === owner.fingerprint) return true;
  return owner.identityVerified && caller.identityVerified;
}

export class Session<V> {
  /** When the link dropped (ms since the epoch); undefined while a link carries the session. */
  suspendedAt: number | undefined;
  /** Times the session was taken back by a new link. */
  resumes = 0;
  /** The highest attempt number taken (SessionClaim.attempt). */
  lastAttempt = 0;
  /** @internal The expiry timer while suspended. */
  timer: NodeJS.Timeout | undefined;

  constructor(
    readonly id: string,
    /** @internal SHA-256 of the secret. */
    readonly secretHash: Buffer,
    readonly owner: SessionOwner,
    /** The resume window agreed for it. */
    readonly windowMs: number,
    public value: V,
  ) {}

  get suspended(): boolean {
    return this.suspendedAt !== undefined;
  }
}

/** How a session left the table: it expired (its window passed, the per-agent limit or the resume budget pushed it out), or its owner ended it. */
export type SessionEnd = 'expired' | 'ended';

/** A session no longer in the table, as a late claim on it finds it (ENDED_REMEMBERED). */
export interface EndedSession {
  id: string;
  agentID: string;
  how: SessionEnd;
  /** When it left the table (ms since the epoch). */
  endedAt: number;
}

export type SessionLookup<V> =
  /** The caller may take the session back (take()). */
  | { kind: 'found'; session: Session<V> }
  /** No such session here (never was, expired, or the secret is wrong): the call starts a new one. */
  | { kind: 'unknown'; reason: 'no-session' | 'wrong-secret' | 'malformed' }
  /** The token is right, but the agentID or certificate is not its owner's (sameOwner): refuse; leave the session alone. */
  | { kind: 'foreign'; session: Session<V> }
  /** An attempt not above one already taken: a call that arrived late; refuse it. */
  | { kind: 'stale'; session: Session<V> }
  /** The token was one of ours, but the session is over (the agent came back too late): the call starts a new one. */
  | { kind: 'ended'; ended: EndedSession };

/** What the claims of one call found. */
export interface ClaimResolution<V> {
  /** The session the call takes back, with the claim (the agent's count) that found it. */
  found: { session: Session<V>; claim: SessionClaim } | undefined;
  /** Sessions whose token came with another agentID or certificate: refused, left alone. */
  foreign: Session<V>[];
  /** Sessions claimed with an attempt already superseded: the call is a late one. */
  stale: Session<V>[];
  /** Sessions this server held, but that are over: the agent came back too late. */
  ended: EndedSession[];
  /** Claims that found nothing here (another replica's, long gone, or wrong). */
  unknown: number;
}

export interface SessionTableOptions<V> {
  /**
   * A suspended session ended after `suspendedForMs`, for `reason`: its window
   * passed ('window'), a newer one of its agent pushed it out
   * ('superseded_limit'), or the owner expired it early (expireEarly). It is
   * out of the table already; the owner closes what it carried.
   */
  onExpire(session: Session<V>, suspendedForMs: number | undefined, reason: SessionExpiry): void;
  /**
   * Suspended sessions one agentID may have; suspending one more expires its
   * oldest at once (onExpire). Default 4, the default --max-agent-streams.
   */
  maxSuspendedPerAgent?: number;
}

/**
 * Sessions remembered after they leave the table, newest kept, so that a
 * claim arriving after the window (or after the session was ended) is told
 * apart from another replica's: the server can say, and count, that an agent
 * came back too late. About 100 bytes each.
 */
const ENDED_REMEMBERED = 1024;

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

export class SessionTable<V> {
  private readonly sessions = new Map<string, Session<V>>();
  /** Suspended sessions by agentID, oldest first (a Set keeps insertion order). */
  private readonly suspendedByAgent = new Map<string, Set<Session<V>>>();
  /** Every suspended session, oldest first. */
  private readonly suspendedInOrder = new Set<Session<V>>();
  /** Sessions that left the table, oldest first, with the hash that proves a claim on them (ENDED_REMEMBERED). */
  private readonly endedSessions = new Map<string, { ended: EndedSession; secretHash: Buffer }>();
  private readonly onExpire: (session: Session<V>, suspendedForMs: number | undefined, reason: SessionExpiry) => void;
  private readonly maxSuspendedPerAgent: number;

  constructor(opts: SessionTableOptions<V>) {
    this.onExpire = (session, suspendedForMs, reason) => opts.onExpire(session, suspendedForMs, reason);
    this.maxSuspendedPerAgent = opts.maxSuspendedPerAgent ?? 4;
    if (!Number.isInteger(this.maxSuspendedPerAgent) || this.maxSuspendedPerAgent < 1) {
      throw new TypeError(`maxSuspendedPerAgent must be a positive integer, got ${this.maxSuspendedPerAgent}`);
    }
  }

  /** A new session for a link of `owner`; the token goes to the agent (and nowhere else: never log it). */
  open(owner: SessionOwner, windowMs: number, value: V): { session: Session<V>; token: string } {
    let id = randomBytes(SESSION_ID_BYTES).toString('base64url');
    while (this.sessions.has(id)) id = randomBytes(SESSION_ID_BYTES).toString('base64url');
    const secret = randomBytes(SESSION_SECRET_BYTES).toString('base64url');
    const session = new Session(id, sha256(secret), { ...owner }, windowMs, value);
    this.sessions.set(id, session);
    return { session, token: `${id}.${secret}` };
  }

  /** What a claim presented by a call of `caller` finds. Changes nothing. */
  find(claim: SessionClaim, caller: SessionOwner): SessionLookup<V> {
    const token = parseSessionToken(claim.token);
    if (token === undefined) return { kind: 'unknown', reason: 'malformed' };
    const session = this.sessions.get(token.id);
    if (session === undefined) {
      const gone = this.endedSessions.get(token.id);
      if (gone !== undefined && timingSafeEqual(sha256(token.secret), gone.secretHash)) return { kind: 'ended', ended: { ...gone.ended } };
      return { kind: 'unknown', reason: 'no-session' };
    }
    if (!timingSafeEqual(sha256(token.secret), session.secretHash)) return { kind: 'unknown', reason: 'wrong-secret' };
    if (!sameOwner(session.owner, caller)) return { kind: 'foreign', session };
    if (claim.attempt <= session.lastAttempt) return { kind: 'stale', session };
    return { kind: 'found', session };
  }

  /**
   * Looks up every claim of one call (an agent presents one per session it
   * wants back, and behind a load balancer cannot know which replica it
   * reached): the first it may take, and the ones refused, for logs and
   * metrics. Changes nothing.
   */
  resolve(claims: readonly SessionClaim[], caller: SessionOwner): ClaimResolution<V> {
    const out: ClaimResolution<V> = { found: undefined, foreign: [], stale: [], ended: [], unknown: 0 };
    for (const claim of claims) {
      const r = this.find(claim, caller);
      if (r.kind === 'found') out.found ??= { session: r.session, claim };
      else if (r.kind === 'foreign') out.foreign.push(r.session);
      else if (r.kind === 'stale') out.stale.push(r.session);
      else if (r.kind === 'ended') out.ended.push(r.ended);
      else out.unknown++;
    }
    return out;
  }

  /**
   * A new link carries `session` from now on (the caller has detached the
   * old one, whether it had dropped or still looked alive): its timer stops.
   * False if the session is no longer in the table.
   */
  take(session: Session<V>, attempt: number): boolean {
    if (this.sessions.get(session.id) !== session) return false;
    this.stopTimer(session);
    session.resumes++;
    session.lastAttempt = Math.max(session.lastAttempt, attempt);
    return true;
  }

  /**
   * The session's link dropped without a goodbye: it ends when its window
   * passes, unless taken back first. Past maxSuspendedPerAgent, the agent's
   * oldest suspended session expires now. Idempotent.
   */
  suspend(session: Session<V>, now = Date.now()): void {
    if (this.sessions.get(session.id) !== session || session.suspended) return;
    const agentID = session.owner.agentID;
    let suspended = this.suspendedByAgent.get(agentID);
    if (suspended === undefined) {
      suspended = new Set();
      this.suspendedByAgent.set(agentID, suspended);
    }
    while (suspended.size >= this.maxSuspendedPerAgent) {
      const oldest = suspended.values().next().value!;
      this.expire(oldest, 'superseded_limit');
    }
    session.suspendedAt = now;
    suspended.add(session);
    this.suspendedInOrder.add(session);
    session.timer = setTimeout(() => this.expire(session, 'window'), session.windowMs);
    session.timer.unref();
  }

  /** Takes the session out (a goodbye, or its link ended it); no onExpire. True if it was there. */
  end(session: Session<V>, how: SessionEnd = 'ended', now = Date.now()): boolean {
    if (this.sessions.get(session.id) !== session) return false;
    this.stopTimer(session);
    this.sessions.delete(session.id);
    this.endedSessions.set(session.id, { ended: { id: session.id, agentID: session.owner.agentID, how, endedAt: now }, secretHash: session.secretHash });
    if (this.endedSessions.size > ENDED_REMEMBERED) this.endedSessions.delete(this.endedSessions.keys().next().value!);
    return true;
  }

  get size(): number {
    return this.sessions.size;
  }

  get suspendedCount(): number {
    return this.suspendedInOrder.size;
  }

  /** The suspended sessions, longest suspended first (a copy). */
  suspendedOldestFirst(): Session<V>[] {
    return [...this.suspendedInOrder];
  }

  /** Ends a suspended session before its window passes, with onExpire(`reason`). False unless it was suspended here. */
  expireEarly(session: Session<V>, reason: SessionExpiry): boolean {
    if (this.sessions.get(session.id) !== session || !session.suspended) return false;
    this.expire(session, reason);
    return true;
  }

  /** The suspended sessions of one agent, oldest first (a copy). */
  suspendedOf(agentID: string): Session<V>[] {
    return [...(this.suspendedByAgent.get(agentID) ?? [])];
  }

  /** Every session held, live and suspended. */
  all(): IterableIterator<Session<V>> {
    return this.sessions.values();
  }

  /** The sessions of one agent, for logs and /debug. */
  sessionsOf(agentID: string): Session<V>[] {
    return [...this.sessions.values()].filter((s) => s.owner.agentID === agentID);
  }

  /** Forgets every session and stops every timer, without onExpire (the server is stopping: its owner closes what they carry). */
  close(): void {
    for (const session of this.sessions.values()) clearTimeout(session.timer);
    this.sessions.clear();
    this.suspendedByAgent.clear();
    this.suspendedInOrder.clear();
    this.endedSessions.clear();
  }

  private expire(session: Session<V>, reason: SessionExpiry): void {
    const since = session.suspendedAt;
    if (!this.end(session, 'expired')) return;
    this.onExpire(session, since === undefined ? undefined : Date.now() - since, reason);
  }

  private stopTimer(session: Session<V>): void {
    clearTimeout(session.timer);
    session.timer = undefined;
    if (session.suspendedAt === undefined) return;
    session.suspendedAt = undefined;
    this.suspendedInOrder.delete(session);
    const agentID = session.owner.agentID;
    const suspended = this.suspendedByAgent.get(agentID);
    suspended?.delete(session);
    if (suspended?.size === 0) this.suspendedByAgent.delete(agentID);
  }
}
