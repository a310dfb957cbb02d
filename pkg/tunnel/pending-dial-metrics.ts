// The fullest agent's pending dials beside their limit
// (--max-pending-dials-per-agent), read from the agent table at scrape time:
// no per-agent label, yet an alert sees one agent near the limit.

import { Gauge, type Registry } from '../metrics/prom.js';
import type { BackendRegistry } from './backend-registry.js';

export function watchPendingDialsPerAgent(registry: Registry, backends: BackendRegistry, limit: number): void {
  new Gauge({
    name: 'yurttunnel_server_agent_pending_dials_max',
    help: "The most dials waiting for one agent's DIAL_RSP, over all agents.",
    registers: [registry],
    collect() {
      const byAgent = new Map<string, number>();
      for (const b of backends.all()) byAgent.set(b.agentID, (byAgent.get(b.agentID) ?? 0) + b.pendingDialCount);
      let most = 0;
      for (const n of byAgent.values()) most = Math.max(most, n);
      this.set(most);
    },
  });
  new Gauge({
    name: 'yurttunnel_server_max_pending_dials_per_agent',
    help: 'The limit of dials waiting for one agent (--max-pending-dials-per-agent).',
    registers: [registry],
    collect() {
      this.set(limit);
    },
  });
}
