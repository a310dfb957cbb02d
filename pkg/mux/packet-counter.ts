// Konnectivity's `*_stream_packets_total{packet_type, segment}` for one side of
// the tunnel. Counted per packet on the data path, so a packet costs one
// integer increment: the counts live in plain numbers and prom-client reads
// them at scrape time (a labelled prom-client increment hashes its labels on
// every call, which showed in the per-packet profile).

import { Counter, type Registry } from '../metrics/prom.js';

export class PacketCounter<Segment extends string> {
  private readonly counts = new Map<Segment, Map<string, number>>();
  /** What prom-client has been told so far, per segment and type. */
  private readonly reported = new Map<string, number>();

  constructor(name: string, help: string, registry: Registry) {
    // eslint-disable-next-line @typescript-eslint/no-this-alias -- prom-client calls collect() with the Counter as this
    const self = this;
    new Counter({
      name,
      help,
      labelNames: ['packet_type', 'segment'],
      registers: [registry],
      collect() {
        for (const [segment, byType] of self.counts) {
          for (const [type, n] of byType) {
            const key = `${segment}/${type}`;
            const delta = n - (self.reported.get(key) ?? 0);
            if (delta > 0) {
              this.inc({ packet_type: type, segment }, delta);
              self.reported.set(key, n);
            }
          }
        }
      },
    });
  }

  inc(segment: Segment, type: string): void {
    let bySegment = this.counts.get(segment);
    if (bySegment === undefined) {
      bySegment = new Map();
      this.counts.set(segment, bySegment);
    }
    bySegment.set(type, (bySegment.get(type) ?? 0) + 1);
  }
}
