// The process's CPU time and resident memory under the names every Prometheus
// client uses (process_cpu_seconds_total, process_resident_memory_bytes), for
// the dashboard's panels. Only these two and the start time: prom-client's
// default metrics cost an agent ~3 MB (prom.ts).

import { Counter, Gauge, type Registry } from './prom.js';

export function watchProcess(registry: Registry): void {
  let reportedMicros = 0;
  new Counter({
    name: 'process_cpu_seconds_total',
    help: 'User and system CPU time spent, in seconds.',
    registers: [registry],
    collect() {
      const { user, system } = process.cpuUsage();
      const now = user + system;
      if (now > reportedMicros) {
        this.inc((now - reportedMicros) / 1e6);
        reportedMicros = now;
      }
    },
  });
  new Gauge({
    name: 'process_resident_memory_bytes',
    help: 'Resident memory size in bytes.',
    registers: [registry],
    collect() {
      this.set(process.memoryUsage.rss());
    },
  });
  const started = Math.round(Date.now() / 1000 - process.uptime());
  new Gauge({
    name: 'process_start_time_seconds',
    help: 'Start time of the process since the epoch, in seconds.',
    registers: [registry],
    collect() {
      this.set(started);
    },
  });
}
