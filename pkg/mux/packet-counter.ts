// Konnectivity's `*_stream_packets_total{packet_type, segment}` for one side of
// the tunnel. Counted per packet on the data path, so each (segment, type)
// child is looked up once and kept, with no label object or key string per packet.

import { Counter, type Registry } from 'prom-client';

type Child = { inc(n?: number): void };

export class PacketCounter<Segment extends string> {
  private readonly counter: Counter<'packet_type' | 'segment'>;
  private readonly children = new Map<Segment, Map<string, Child>>();

  constructor(name: string, help: string, registry: Registry) {
    this.counter = new Counter({ name, help, labelNames: ['packet_type', 'segment'], registers: [registry] });
  }

  inc(segment: Segment, type: string): void {
    let bySegment = this.children.get(segment);
    if (bySegment === undefined) {
      bySegment = new Map();
      this.children.set(segment, bySegment);
    }
    let child = bySegment.get(type);
    if (child === undefined) {
      child = this.counter.labels(type, segment);
      bySegment.set(type, child);
    }
    child.inc();
  }
}
