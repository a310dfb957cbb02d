// The session claims of an admitted agent call that are not honoured (a
// certificate other than the session's, a stale attempt, a session already
// over here): each counted and logged through the endpoint's limiter.

import type { LogLimiter } from '../log/log-limiter.js';
import type { Backend } from '../tunnel/backend.js';
import type { ClaimResolution } from '../tunnel/session-table.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import type { AgentMetadata } from './admission.js';

/**
 * Logs and counts the session claims of an admitted call that are not
 * honoured; true when the call must be refused for it (a stale attempt and
 * no session found).
 */
export function logClaimRefusals(tunnel: Tunnel, limited: LogLimiter, claims: ClaimResolution<Backend>, meta: AgentMetadata, remoteAddress: string): boolean {
  for (const s of claims.foreign) {
    tunnel.resumeMetrics.claimRefused('foreign_certificate');
    limited.warn('session token presented with another certificate or agentID; not honoured', {
      agentID: meta.agentID,
      sessionOf: s.owner.agentID,
      sameAgentID: s.owner.agentID === meta.agentID,
      session: s.id,
      remoteAddress,
    });
  }
  for (const s of claims.stale) {
    tunnel.resumeMetrics.claimRefused('stale_attempt');
    limited.verbose(2, 'stale session resume attempt refused', { agentID: meta.agentID, session: s.id, remoteAddress });
  }
  for (const ended of claims.ended) {
    // The agent came back too late: its connections are gone on this side; the call carries a fresh session.
    tunnel.resumeMetrics.claimRefused(ended.how === 'expired' ? 'session_expired' : 'session_ended');
    limited.warn('session claim on a session that is over here; the agent gets a fresh one', {
      agentID: meta.agentID,
      sessionOf: ended.agentID,
      session: ended.id,
      how: ended.how,
      endedMsAgo: Date.now() - ended.endedAt,
      remoteAddress,
    });
  }
  return claims.found === undefined && claims.stale.length > 0;
}
