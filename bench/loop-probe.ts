// Loaded into our server or agent with `node --import <this file>` (bench
// only). Each SIGUSR2 toggles a measured phase:
//   on:  resets the event-loop delay histogram (perf_hooks.monitorEventLoopDelay,
//        1 ms resolution) and the GC tally, and starts a CPU profile (in-process inspector);
//   off: stops the profile, writes it to $YT_PROBE_DIR/<script folder>-<pid>-<n>.cpuprofile
//        and prints one line to stderr:
//        yt-probe {"name":…,"file":…,"loopDelay":{…µs},"gc":{"minor":{count,ms},…},"cpu":{user,system µs}}
// so that bench/profile.ts can say where a phase's time went.

import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { PerformanceObserver, constants, monitorEventLoopDelay } from 'node:perf_hooks';

// yurt-tunnel-server or yurt-tunnel-agent, from the script's folder.
const name = `${basename(dirname(process.argv[1] ?? ''))}-${process.pid}`;
const dir = process.env.YT_PROBE_DIR ?? '.';
const loop = monitorEventLoopDelay({ resolution: 1 });
loop.enable();

const GC_KINDS: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
};
let gc: Record<string, { count: number; ms: number; maxMs: number }> = {};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = GC_KINDS[(e as { detail?: { kind?: number } }).detail?.kind ?? 0] ?? 'other';
    const t = (gc[kind] ??= { count: 0, ms: 0, maxMs: 0 });
    t.count++;
    t.ms += e.duration;
    t.maxMs = Math.max(t.maxMs, e.duration);
  }
}).observe({ entryTypes: ['gc'] });

// YT_PROBE_CPU_PROFILE=0: no V8 profile (e.g. while `perf` samples the process: the two would distort each other).
const profiling = process.env.YT_PROBE_CPU_PROFILE !== '0';
const session = new Session();
if (profiling) session.connect();
let phase = 0;
let on = false;
let cpuAtStart = process.cpuUsage();

process.on('SIGUSR2', () => {
  if (!on) {
    on = true;
    loop.reset();
    gc = {};
    cpuAtStart = process.cpuUsage();
    if (profiling) session.post('Profiler.enable', () => session.post('Profiler.setSamplingInterval', { interval: 200 }, () => session.post('Profiler.start')));
    return;
  }
  on = false;
  const cpu = process.cpuUsage(cpuAtStart);
  const us = (ns: number): number => Math.round(ns / 1000);
  const loopDelay = {
    p50: us(loop.percentile(50)),
    p99: us(loop.percentile(99)),
    max: us(loop.max),
    mean: us(loop.mean),
  };
  const snapshot = { ...gc };
  if (!profiling) {
    process.stderr.write(`yt-probe ${JSON.stringify({ name, file: 'error: not profiled', loopDelay, gc: snapshot, cpu })}\n`);
    return;
  }
  session.post('Profiler.stop', (err, result) => {
    const file = join(dir, `${name}-${++phase}.cpuprofile`);
    if (err === null) writeFileSync(file, JSON.stringify(result.profile));
    process.stderr.write(`yt-probe ${JSON.stringify({ name, file: err === null ? file : `error: ${err.message}`, loopDelay, gc: snapshot, cpu })}\n`);
  });
});
