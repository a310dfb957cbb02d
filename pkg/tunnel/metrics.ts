// Prometheus metrics of the tunnel core. Table sizes are read at scrape time
// from the tables themselves, so a gauge can never drift from its table.
// Konnectivity's names and label sets where it has the idea (checked against
// the v0.30 proxy-server's /metrics), ours (`yurttunnel_server_*`) beside them.
// No label carries a node name, an address or a connectID.

import { Counter, Gauge, Histogram, Registry } from '../metrics/prom.js';
import type { DialFailureReason } from '../protocol/errors.js';
import type { PacketTypeName } from '../protocol/packet.js';
import { PacketCounter } from '../mux/packet-counter.js';

export interface TunnelTableSizes {
  backends(): number;
  agents(): number;
  pendingDials(): number;
  establishedConnections(): number;
}

const KONNECTIVITY = 'konnectivity_network_proxy_server';

// Every reason, written at 0 from the start: a series that first appears at 1
// has no increase() in Prometheus, so an alert would miss the first failure.
// (A Record over the union: a new reason that is not listed fails to compile.)
const DIAL_FAILURE_REASONS: Record<DialFailureReason, true> = {
  YT_ERR_NO_AGENT: true,
  YT_ERR_DIAL_FAILED: true,
  YT_ERR_DIAL_DENIED: true,
  YT_ERR_DIAL_TIMEOUT: true,
  YT_ERR_AGENT_GONE: true,
  YT_ERR_AGENT_LOST: true,
  YT_ERR_DIAL_CANCELLED: true,
  YT_ERR_TUNNEL_CLOSED: true,
  YT_ERR_TOO_MANY_DIALS: true,
  YT_ERR_BAD_ADDRESS: true,
  YT_ERR_DIAL_LOOP: true,
};

/** Konnectivity's dial failure reasons for ours. */
function konnectivityReason(reason: DialFailureReason): string {
  switch (reason) {
    case 'YT_ERR_DIAL_TIMEOUT':
      return 'timeout';
    case 'YT_ERR_AGENT_GONE':
    case 'YT_ERR_AGENT_LOST':
    case 'YT_ERR_TUNNEL_CLOSED':
      return 'backend_close';
    case 'YT_ERR_DIAL_CANCELLED':
      return 'frontend_close';
    case 'YT_ERR_NO_AGENT':
      return 'no_backend';
    default:
      return 'error_response';
  }
}

function writeReasonsAtZero(dialFailures: Counter<'reason'>, konnectivityDialFailures: Counter<'reason'>, closed: Counter<'reason'>): void {
  for (const reason of Object.keys(DIAL_FAILURE_REASONS) as DialFailureReason[]) {
    dialFailures.inc({ reason }, 0);
    konnectivityDialFailures.inc({ reason: konnectivityReason(reason) }, 0);
  }
  // The stalled-connections alert counts these.
  closed.inc({ reason: 'YT_ERR_CONN_STALLED' }, 0);
}

export class TunnelMetrics {
  readonly registry: Registry;
  private readonly dialFailures: Counter<'reason'>;
  private readonly konnectivityDialFailures: Counter<'reason'>;
  private readonly dialDuration: Histogram;
  private readonly streamPackets: PacketCounter<'to_agent' | 'from_agent'>;
  private readonly closed: Counter<'reason'>;
  private readonly unknownPackets: Counter<'packet_type'>;
  private readonly cutOff: Counter<'reason'>;
  /** Bytes of connections that have closed; open ones are added at scrape time. */
  private closedBytes = { to_agent: 0, from_agent: 0 };
  private reportedBytes = { to_agent: 0, from_agent: 0 };

  constructor(
    sizes: TunnelTableSizes,
    registry = new Registry(),
    openBytes: () => { to_agent: number; from_agent: number } = () => ({ to_agent: 0, from_agent: 0 }),
  ) {
    this.registry = registry;
    const gauge = (name: string, help: string, read: () => number): void => {
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(read());
        },
      });
    };
    // Where Konnectivity has a metric for the idea, it is the only one (below).
    gauge('yurttunnel_server_registered_agents', 'Distinct agents connected to this server.', () => sizes.agents());
    this.dialFailures = new Counter({
      name: 'yurttunnel_server_dial_failures_total',
      help: 'Dials that did not produce a connection, by reason.',
      labelNames: ['reason'],
      registers: [registry],
    });
    gauge(`${KONNECTIVITY}_ready_backend_connections`, 'Agent streams connected to this server.', () => sizes.backends());
    gauge(`${KONNECTIVITY}_pending_backend_dials`, 'Dials waiting for an agent DIAL_RSP.', () => sizes.pendingDials());
    gauge(`${KONNECTIVITY}_established_connections`, 'Tunnelled connections currently open.', () => sizes.establishedConnections());
    this.konnectivityDialFailures = new Counter({
      name: `${KONNECTIVITY}_dial_failure_count`,
      help: "Dials that did not produce a connection, by Konnectivity's reason.",
      labelNames: ['reason'],
      registers: [registry],
    });
    this.dialDuration = new Histogram({
      name: `${KONNECTIVITY}_dial_duration_seconds`,
      help: 'Time from DIAL_REQ to a successful DIAL_RSP.',
      buckets: [0.000001, 0.00001, 0.0001, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5],
      registers: [registry],
    });
    this.streamPackets = new PacketCounter(`${KONNECTIVITY}_stream_packets_total`, 'Packets on agent streams, by direction (segment) and type.', registry);
    this.closed = new Counter({
      name: 'yurttunnel_server_connections_closed_total',
      help: 'Tunnelled connections that ended, by how (closed, or the YT_ERR_* code of the error).',
      labelNames: ['reason'],
      registers: [registry],
    });
    writeReasonsAtZero(this.dialFailures, this.konnectivityDialFailures, this.closed);
    this.unknownPackets = new Counter({
      name: 'yurttunnel_server_unknown_connection_packets_total',
      help: 'Packets agents sent for connections or dials they do not hold on their stream, by type.',
      labelNames: ['packet_type'],
      registers: [registry],
    });
    this.cutOff = new Counter({
      name: 'yurttunnel_server_agent_streams_cut_off_total',
      help: 'Agent streams the server ended because the agent misbehaved, by reason (unknown_connection_packets: past --max-unknown-packets-per-agent).',
      labelNames: ['reason'],
      registers: [registry],
    });
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- prom-client calls collect() with the Counter as this
    const metrics = this;
    new Counter({
      name: 'yurttunnel_server_tunnelled_bytes_total',
      help: 'Bytes carried through the tunnel, to the agents and from them.',
      labelNames: ['direction'],
      registers: [registry],
      collect() {
        const open = openBytes();
        for (const direction of ['to_agent', 'from_agent'] as const) {
          const now = metrics.closedBytes[direction] + open[direction];
          const delta = now - metrics.reportedBytes[direction];
          // Open connections that closed between scrapes moved their bytes to closedBytes: never negative.
          if (delta > 0) {
            this.inc({ direction }, delta);
            metrics.reportedBytes[direction] = now;
          }
        }
      },
    });
  }

  connectionClosed(reason: string, bytesToAgent: number, bytesFromAgent: number): void {
    this.closed.inc({ reason });
    this.closedBytes.to_agent += bytesToAgent;
    this.closedBytes.from_agent += bytesFromAgent;
  }

  packetSent(type: PacketTypeName): void {
    this.streamPackets.inc('to_agent', type);
  }

  dialFailed(reason: DialFailureReason): void {
    this.dialFailures.inc({ reason });
    this.konnectivityDialFailures.inc({ reason: konnectivityReason(reason) });
  }

  unknownConnectionPacket(type: PacketTypeName): void {
    this.unknownPackets.inc({ packet_type: type });
  }

  agentCutOff(reason: 'unknown_connection_packets'): void {
    this.cutOff.inc({ reason });
  }

  dialSucceeded(seconds: number): void {
    this.dialDuration.observe(seconds);
  }

  packetReceived(type: PacketTypeName | 'UNKNOWN'): void {
    this.streamPackets.inc('from_agent', type);
  }

  /** Current count of failures for `reason` (for tests and /debug). */
  async failures(reason: DialFailureReason): Promise<number> {
    const m = await this.dialFailures.get();
    return m.values.find((v) => v.labels.reason === reason)?.value ?? 0;
  }
}
