// Prometheus metrics of the tunnel core. Table sizes are read at scrape time
// from the tables themselves, so a gauge can never drift from its table.

import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { DialFailureReason } from '../protocol/errors.js';
import type { PacketTypeName } from '../protocol/packet.js';

export interface TunnelTableSizes {
  backends(): number;
  agents(): number;
  pendingDials(): number;
  establishedConnections(): number;
}

export class TunnelMetrics {
  readonly registry: Registry;
  private readonly dialFailures: Counter<'reason'>;
  private readonly dialDuration: Histogram;
  private readonly packets: Counter<'type'>;
  private readonly packetChildren = new Map<string, { inc(n?: number): void }>();

  constructor(sizes: TunnelTableSizes, registry = new Registry()) {
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
    gauge('yurttunnel_server_ready_backends', 'Agent streams connected to this server.', () => sizes.backends());
    gauge('yurttunnel_server_registered_agents', 'Distinct agents connected to this server.', () => sizes.agents());
    gauge('yurttunnel_server_pending_dials', 'Dials waiting for an agent DIAL_RSP.', () => sizes.pendingDials());
    gauge(
      'yurttunnel_server_established_connections',
      'Tunnelled connections currently open.',
      () => sizes.establishedConnections(),
    );
    this.dialFailures = new Counter({
      name: 'yurttunnel_server_dial_failures_total',
      help: 'Dials that did not produce a connection, by reason.',
      labelNames: ['reason'],
      registers: [registry],
    });
    this.dialDuration = new Histogram({
      name: 'yurttunnel_server_dial_duration_seconds',
      help: 'Time from DIAL_REQ to a successful DIAL_RSP.',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    });
    this.packets = new Counter({
      name: 'yurttunnel_server_agent_packets_received_total',
      help: 'Packets received on agent streams, by type.',
      labelNames: ['type'],
      registers: [registry],
    });
  }

  dialFailed(reason: DialFailureReason): void {
    this.dialFailures.inc({ reason });
  }

  dialSucceeded(seconds: number): void {
    this.dialDuration.observe(seconds);
  }

  packetReceived(type: PacketTypeName | 'UNKNOWN'): void {
    let child = this.packetChildren.get(type);
    if (child === undefined) {
      child = this.packets.labels(type);
      this.packetChildren.set(type, child);
    }
    child.inc();
  }

  /** Current count of failures for `reason` (for tests and /debug). */
  async failures(reason: DialFailureReason): Promise<number> {
    const m = await this.dialFailures.get();
    return m.values.find((v) => v.labels.reason === reason)?.value ?? 0;
  }
}
