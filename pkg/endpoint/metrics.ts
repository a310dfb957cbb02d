// What the agent endpoint counts, in the registry it is given: calls and
// packets refused by a limit. (Callers closed before their TLS handshake
// finished are counted with every listener's, pkg/net/caller-refusals.ts.)

import { Counter, Registry } from '../metrics/prom.js';

/** The limit that refused an agent's call or packet: the `reason` label. */
export type AgentRefusalReason = 'stream_limit' | 'connect_rate' | 'unread_control';

const REASONS: readonly AgentRefusalReason[] = ['stream_limit', 'connect_rate', 'unread_control'];

export class AgentEndpointMetrics {
  private readonly refusals: Counter<'reason'>;
  private readonly tally: Record<AgentRefusalReason, number> = { stream_limit: 0, connect_rate: 0, unread_control: 0 };

  constructor(registry = new Registry()) {
    this.refusals = new Counter({
      name: 'yurttunnel_server_agent_refusals_total',
      help:
        'Agent calls and packets refused by a limit: stream_limit (--max-agent-streams), connect_rate (--max-agent-connect-rate), ' +
        'unread_control (an agent that does not read).',
      labelNames: ['reason'],
      registers: [registry],
    });
    for (const reason of REASONS) this.refusals.inc({ reason }, 0);
  }

  refused(reason: AgentRefusalReason): void {
    this.tally[reason]++;
    this.refusals.inc({ reason });
  }

  /** What was refused so far, by reason. */
  get refusedSoFar(): Readonly<Record<AgentRefusalReason, number>> {
    return { ...this.tally };
  }
}
