// What the kernel says about a process: CPU time (utime + stime over all its
// threads, /proc/<pid>/stat) and resident memory (/proc/<pid>/status VmRSS,
// smaps_rollup Pss), and what the machine has left (/proc/meminfo).

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

let ticksPerSecond: number | undefined;

function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** CPU seconds (user + system) the process has used so far. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) may hold spaces; count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
  return (Number(fields[11]) + Number(fields[12])) / clockTicks();
}

/** Resident set size in bytes. */
export function rssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? 0 : Number(m[1]) * 1024;
}

/** CPU seconds of several processes, read together. */
export function cpuOf(pids: readonly number[]): number[] {
  return pids.map(cpuSeconds);
}

/** The 1-minute load average. */
export function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

/** Total CPU seconds the whole machine has been busy (all CPUs, /proc/stat), for the share others used meanwhile. */
export function machineBusySeconds(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal
  const busy = v[0]! + v[1]! + v[2]! + v[5]! + v[6]! + v[7]!;
  return busy / clockTicks();
}

/** Proportional set size in bytes (/proc/<pid>/smaps_rollup): shared pages split among the processes that map them, so many processes of one binary add up to what they cost the machine. */
export function pssBytes(pid: number): number {
  const m = /^Pss:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'));
  return m === null ? 0 : Number(m[1]) * 1024;
}

/** The kernel's estimate of memory available to new work (/proc/meminfo MemAvailable), in bytes. */
export function memAvailableBytes(): number {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSync('/proc/meminfo', 'utf8'));
  return m === null ? 0 : Number(m[1]) * 1024;
}
