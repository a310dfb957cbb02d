// Session resume's metrics on the server (proto/yurttunnel_ext.proto): links
// that dropped and were kept, sessions resumed and expired, what was resent,
// claims refused, and the memory budget they share. Sizes are read from the
// tables at scrape time.

import { Counter, Gauge, type Registry } from '../metrics/prom.js';

export interface ResumeSizes {
  suspended(): number;
  /** Packets and DATA bytes resent on resumes so far, open and ended sessions together. */
  resent(): { packets: number; bytes: number };
  /** The server-wide resume memory budget: bytes kept now, the limit, and how often links waited for room. */
  budget(): { used: number; limit: number; waits: number };
}

/**
 * Why a suspended session ended without being resumed. `agent_restarted`: a new
 * link of the same agent claimed none of its sessions (a new process).
 */
export type SessionExpiry =
  | 'window'
  | 'superseded_limit'
  | 'agent_restarted'
  | 'YT_ERR_RESUME_BAD_COUNT'
  | 'YT_ERR_RESUME_ACK_AHEAD'
  | 'YT_ERR_RESUME_BUFFER_FULL'
  | 'YT_ERR_RESUME_BUDGET';

/**
 * Why a session claim was not honoured: another certificate, a late attempt,
 * or a session this server held that is over (the agent came back after its
 * window, or after it ended). Unknown claims are normal behind a balancer and
 * not counted.
 */
/** Every expiry reason, written at 0 from the start so that the first one shows in increase() (the resume alert). */
const SESSION_EXPIRIES: Record<SessionExpiry, true> = {
  window: true,
  superseded_limit: true,
  agent_restarted: true,
  YT_ERR_RESUME_BAD_COUNT: true,
  YT_ERR_RESUME_ACK_AHEAD: true,
  YT_ERR_RESUME_BUFFER_FULL: true,
  YT_ERR_RESUME_BUDGET: true,
};

export type ClaimRefusal = 'foreign_certificate' | 'stale_attempt' | 'session_expired' | 'session_ended';

export class ResumeMetrics {
  private readonly linksSuspended: Counter;
  private readonly resumed: Counter;
  private readonly expired: Counter<'reason'>;
  private readonly refused: Counter<'reason'>;

  constructor(registry: Registry, sizes: ResumeSizes) {
    this.linksSuspended = new Counter({
      name: 'yurttunnel_server_agent_links_suspended_total',
      help: 'Agent links that dropped without a goodbye and whose connections were kept for the resume window.',
      registers: [registry],
    });
    new Gauge({
      name: 'yurttunnel_server_suspended_agent_sessions',
      help: 'Agent sessions waiting for their agent to resume them.',
      registers: [registry],
      collect() {
        this.set(sizes.suspended());
      },
    });
    this.resumed = new Counter({
      name: 'yurttunnel_server_agent_sessions_resumed_total',
      help: 'Agent sessions taken back by a new link within the resume window.',
      registers: [registry],
    });
    this.expired = new Counter({
      name: 'yurttunnel_server_agent_sessions_expired_total',
      help: 'Suspended agent sessions that ended without a resume, by reason (window, superseded_limit, agent_restarted: a new process of the agent connected without claiming it, or a YT_ERR_RESUME_* code; YT_ERR_RESUME_BUDGET: expired early for --resume-memory-budget).',
      labelNames: ['reason'],
      registers: [registry],
    });
    for (const reason of Object.keys(SESSION_EXPIRIES)) this.expired.inc({ reason }, 0);
    this.refused = new Counter({
      name: 'yurttunnel_server_session_claims_refused_total',
      help: 'Session claims not honoured, by reason (foreign_certificate, stale_attempt, session_expired, session_ended).',
      labelNames: ['reason'],
      registers: [registry],
    });
    new Gauge({
      name: 'yurttunnel_server_resume_memory_bytes',
      help: 'DATA bytes kept for session resume until agents acknowledge them, all agent links together (at most --resume-memory-budget, plus one packet per waiting writer).',
      registers: [registry],
      collect() {
        this.set(sizes.budget().used);
      },
    });
    new Gauge({
      name: 'yurttunnel_server_resume_memory_budget_bytes',
      help: 'The resume memory budget (--resume-memory-budget): past it writers wait and suspended sessions are expired, oldest first.',
      registers: [registry],
      collect() {
        this.set(sizes.budget().limit);
      },
    });
    let waitsReported = 0;
    new Counter({
      name: 'yurttunnel_server_resume_memory_waits_total',
      help: "Times an agent link's writers waited because the resume memory budget was spent.",
      registers: [registry],
      collect() {
        const now = sizes.budget().waits;
        if (now > waitsReported) {
          this.inc(now - waitsReported);
          waitsReported = now;
        }
      },
    });
    for (const [unit, help] of [
      ['packets', 'Packets resent to agents on session resumes.'],
      ['bytes', 'DATA bytes resent to agents on session resumes.'],
    ] as const) {
      let reported = 0;
      new Counter({
        name: `yurttunnel_server_resent_${unit}_total`,
        help,
        registers: [registry],
        collect() {
          const now = sizes.resent()[unit];
          if (now > reported) {
            this.inc(now - reported);
            reported = now;
          }
        },
      });
    }
  }

  linkSuspended(): void {
    this.linksSuspended.inc();
  }

  sessionResumed(): void {
    this.resumed.inc();
  }

  sessionExpired(reason: SessionExpiry): void {
    this.expired.inc({ reason });
  }

  claimRefused(reason: ClaimRefusal): void {
    this.refused.inc({ reason });
  }
}
