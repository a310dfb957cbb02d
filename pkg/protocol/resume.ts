// Negotiation of yurt-tunnel's session resume (proto/yurttunnel_ext.proto):
// the metadata the agent sends, the response headers the server answers with,
// and the session tokens they carry. Pure parsing and formatting; the session
// table (pkg/tunnel/session-table.ts) makes and checks tokens.

import { ResumeError } from './errors.js';

/** Metadata (agent → server) and response header (server → agent): the resume window in ms. */
export const RESUME_HEADER = 'yurttunnel-resume';
/**
 * Agent → server: one value per session the agent asks to resume,
 * "<token>;<received>;<attempt>". Server → agent: the token of the session the
 * call carries.
 */
export const SESSION_HEADER = 'yurttunnel-session';
/** Server → agent, only when the call resumes a session: the server's count of packets received. */
export const RESUMED_HEADER = 'yurttunnel-resumed';

/** Default of --resume-window. */
export const DEFAULT_RESUME_WINDOW_MS = 10_000;
export const MIN_RESUME_WINDOW_MS = 100;
export const MAX_RESUME_WINDOW_MS = 600_000;
/** Sessions one call may ask to resume (an agent keeps one per server replica). */
export const MAX_SESSION_CLAIMS = 8;

/** Random bytes in a session token: the ID (public, for lookup) and the secret. */
export const SESSION_ID_BYTES = 16;
export const SESSION_SECRET_BYTES = 32;

/** "<id>.<secret>", both base64url without padding (22 and 43 characters). */
const TOKEN = /^([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})$/;
/** Counts and attempts in decimal, at most 15 digits (below 2^53). */
const COUNT = /^(0|[1-9]\d{0,14})$/;

export interface SessionToken {
  id: string;
  secret: string;
}

export function parseSessionToken(token: string): SessionToken | undefined {
  const m = TOKEN.exec(token);
  return m === null ? undefined : { id: m[1]!, secret: m[2]! };
}

/** What an agent presents for a session it wants back. */
export interface SessionClaim {
  token: string;
  /** Numbered packets of the session the agent has received. */
  received: number;
  /** Grows with each call that asks for this session; a server ignores one not above the last it took. */
  attempt: number;
}

export function formatSessionClaim(claim: SessionClaim): string {
  return `${claim.token};${claim.received};${claim.attempt}`;
}

/**
 * The claims of one call (its SESSION_HEADER values), or the reason they are
 * unusable: a malformed claim or too many of them refuse the call, since our
 * agent never sends either.
 */
export function parseSessionClaims(values: readonly string[]): SessionClaim[] | ResumeError {
  if (values.length > MAX_SESSION_CLAIMS) {
    return new ResumeError('YT_ERR_RESUME_BAD_CLAIM', `too many "${SESSION_HEADER}" values: ${values.length} (at most ${MAX_SESSION_CLAIMS})`);
  }
  const claims: SessionClaim[] = [];
  for (const value of values) {
    const [token, received, attempt, extra] = value.split(';');
    if (extra !== undefined || token === undefined || parseSessionToken(token) === undefined || !COUNT.test(received ?? '') || !COUNT.test(attempt ?? '')) {
      // Never echo the value: it holds a secret.
      return new ResumeError('YT_ERR_RESUME_BAD_CLAIM', `malformed "${SESSION_HEADER}" value (expected <token>;<received>;<attempt>)`);
    }
    if (claims.some((c) => c.token === token)) {
      return new ResumeError('YT_ERR_RESUME_BAD_CLAIM', `the same session is claimed twice in "${SESSION_HEADER}"`);
    }
    claims.push({ token, received: Number(received), attempt: Number(attempt) });
  }
  return claims;
}

/** An announced resume window in ms; undefined when absent or unusable (then resume stays off). */
export function parseResumeWindow(values: readonly string[]): number | undefined {
  if (values.length !== 1 || !COUNT.test(values[0]!)) return undefined;
  const ms = Number(values[0]);
  return ms >= MIN_RESUME_WINDOW_MS && ms <= MAX_RESUME_WINDOW_MS ? ms : undefined;
}

/** What the server's response headers say of the session a call carries. */
export interface SessionOffer {
  token: string;
  /** The window both ends use. */
  windowMs: number;
  /** Set when the call resumes the session: the server's count of packets received from the agent. */
  resumedReceived?: number;
}

/**
 * The session a server offers, undefined when it offers none (resume is off
 * for the call), or why its headers are unusable.
 */
export function parseSessionOffer(resume: readonly string[], session: readonly string[], resumed: readonly string[]): SessionOffer | ResumeError | undefined {
  if (resume.length === 0 && session.length === 0 && resumed.length === 0) return undefined;
  const windowMs = parseResumeWindow(resume);
  const token = session.length === 1 ? session[0]! : '';
  if (windowMs === undefined || parseSessionToken(token) === undefined) {
    return new ResumeError(
      'YT_ERR_RESUME_BAD_CLAIM',
      `unusable session headers: "${RESUME_HEADER}" ${JSON.stringify(resume)}, ${session.length} "${SESSION_HEADER}" value(s)`,
    );
  }
  if (resumed.length === 0) return { token, windowMs };
  if (resumed.length !== 1 || !COUNT.test(resumed[0]!)) {
    return new ResumeError('YT_ERR_RESUME_BAD_CLAIM', `unusable "${RESUMED_HEADER}" ${JSON.stringify(resumed)}`);
  }
  return { token, windowMs, resumedReceived: Number(resumed[0]) };
}
