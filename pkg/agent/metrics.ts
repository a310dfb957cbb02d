// The agent's Prometheus metrics, with Konnectivity's proxy-agent names and
// labels (checked against v0.30's /metrics). Counts of open links and
// connections are read from the client set at scrape time.

import { Counter, Gauge, Histogram, Registry } from '../metrics/prom.js';
import { PacketCounter } from '../mux/packet-counter.js';
import type { ResumeErrorCode } from '../protocol/errors.js';

const PREFIX = 'konnectivity_network_proxy_agent';

/**
 * Why a suspended session ended (server-connection.ts): written at 0 from the
 * start, so that the first one shows in increase() (the resume alert).
 */
const SESSION_EXPIRIES: Record<'window' | 'lost_by_server' | 'server_gone' | ResumeErrorCode, true> = {
  window: true,
  lost_by_server: true,
  server_gone: true,
  YT_ERR_RESUME_BAD_COUNT: true,
  YT_ERR_RESUME_ACK_AHEAD: true,
  YT_ERR_RESUME_BUFFER_FULL: true,
  YT_ERR_RESUME_BUDGET: true,
  YT_ERR_RESUME_BAD_CLAIM: true,
};

export interface AgentSizes {
  serverConnections(): number;
  endpointConnections(): number;
}

/** Konnectivity's reasons for a failed endpoint dial. */
export function dialFailureReason(code: string | undefined): string {
  switch (code) {
    case 'YT_ERR_DIAL_TIMEOUT':
    case 'ETIMEDOUT':
      return 'timeout';
    case 'ECONNREFUSED':
      return 'refused';
    case 'YT_ERR_DIAL_DENIED':
      return 'denied';
    case 'YT_ERR_DIAL_CANCELLED':
      return 'cancelled';
    default:
      return 'unknown';
  }
}

export class AgentMetrics {
  readonly registry: Registry;
  private readonly dialDuration: Histogram;
  private readonly dialFailures: Counter<'reason'>;
  private readonly packets: PacketCounter<'to_agent' | 'from_agent'>;
  private readonly linksSuspended: Counter;
  private readonly serverConnects: Counter;
  private readonly sessionsResumed: Counter;
  private readonly sessionsExpired: Counter<'reason'>;
  private readonly resentBytes: Counter;

  constructor(registry = new Registry()) {
    this.registry = registry;
    this.dialDuration = new Histogram({
      name: `${PREFIX}_dial_duration_seconds`,
      help: 'Time to connect to the destination of a dial.',
      buckets: [0.005, 0.025, 0.1, 0.5, 2.5, 10, 30],
      registers: [registry],
    });
    this.dialFailures = new Counter({
      name: `${PREFIX}_endpoint_dial_failure_total`,
      help: 'Dials to destinations that failed, by reason (timeout, refused, denied, cancelled, unknown).',
      labelNames: ['reason'],
      registers: [registry],
    });
    this.packets = new PacketCounter(
      `${PREFIX}_stream_packets_total`,
      'Packets on server streams, by direction (segment, as Konnectivity names them) and type.',
      registry,
    );
    this.serverConnects = new Counter({
      name: 'yurttunnel_agent_server_connects_total',
      help: 'Links to tunnel servers established, resumed ones included; many in a few minutes means the agent flaps.',
      registers: [registry],
    });
    this.linksSuspended = new Counter({
      name: 'yurttunnel_agent_server_links_suspended_total',
      help: 'Links to tunnel servers that dropped without a goodbye and whose connections were kept for the resume window.',
      registers: [registry],
    });
    this.sessionsResumed = new Counter({
      name: 'yurttunnel_agent_sessions_resumed_total',
      help: 'Sessions with a tunnel server taken back by a new link within the resume window.',
      registers: [registry],
    });
    this.sessionsExpired = new Counter({
      name: 'yurttunnel_agent_sessions_expired_total',
      help: 'Suspended sessions that ended without a resume, by reason (window, lost_by_server, server_gone, or a YT_ERR_RESUME_* code).',
      labelNames: ['reason'],
      registers: [registry],
    });
    for (const reason of Object.keys(SESSION_EXPIRIES)) this.sessionsExpired.inc({ reason }, 0);
    this.resentBytes = new Counter({
      name: 'yurttunnel_agent_resent_bytes_total',
      help: 'DATA bytes resent to tunnel servers on session resumes.',
      registers: [registry],
    });
  }

  serverConnected(): void {
    this.serverConnects.inc();
  }

  linkSuspended(): void {
    this.linksSuspended.inc();
  }

  sessionResumed(resentBytes: number): void {
    this.sessionsResumed.inc();
    this.resentBytes.inc(resentBytes);
  }

  sessionExpired(reason: string): void {
    this.sessionsExpired.inc({ reason });
  }

  /** Gauges read from the client set; called once it exists. */
  watch(sizes: AgentSizes): void {
    new Gauge({
      name: `${PREFIX}_open_server_connections`,
      help: 'Links to tunnel servers currently open.',
      registers: [this.registry],
      collect() {
        this.set(sizes.serverConnections());
      },
    });
    new Gauge({
      name: `${PREFIX}_open_endpoint_connections`,
      help: 'Connections to destinations currently open.',
      registers: [this.registry],
      collect() {
        this.set(sizes.endpointConnections());
      },
    });
  }

  dialSucceeded(seconds: number): void {
    this.dialDuration.observe(seconds);
  }

  dialFailed(code: string | undefined): void {
    this.dialFailures.inc({ reason: dialFailureReason(code) });
  }

  /** A packet from a server (Konnectivity's agent labels these `to_agent`). */
  packetReceived(type: string): void {
    this.packets.inc('to_agent', type);
  }

  packetSent(type: string): void {
    this.packets.inc('from_agent', type);
  }
}
