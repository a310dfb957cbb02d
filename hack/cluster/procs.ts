// Finding the cluster's processes: those `up` started (state.json), every
// process in a node's mount or network namespace (containerd's shims), and
// every process in the kubelets' cgroups (the containers, which have
// namespaces of their own).

import { existsSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { cgroupPids } from './cgroups.js';
import type { ClusterState } from './state.js';

/** True while `pid` runs (a zombie has ended: only its parent's wait is missing). */
export function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function link(pid: string, kind: string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return undefined;
  }
}

/** Every running process that belongs to the cluster `state` describes, or runs in one of `netns` (`net:[inode]`). */
export function clusterPids(state: ClusterState, netns: string[] = []): number[] {
  const pids = new Set<number>();
  for (const node of state.nodes) {
    pids.add(node.holderPid);
    for (const p of node.processes) pids.add(p.pid);
  }
  for (const dir of state.cgroups) for (const pid of cgroupPids(dir)) pids.add(pid);
  const namespaces = new Set([...state.nodes.flatMap((n) => [n.mntNS, n.netNS]), ...netns]);
  if (namespaces.size > 0 && existsSync('/proc')) {
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      const mnt = link(pid, 'mnt');
      const net = link(pid, 'net');
      if ((mnt !== undefined && namespaces.has(mnt)) || (net !== undefined && namespaces.has(net))) pids.add(Number(pid));
    }
  }
  pids.delete(process.pid);
  return [...pids].filter(alive).sort((a, b) => a - b);
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // Ended meanwhile.
  }
}

function commandName(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return '?';
  }
}

export interface StopResult {
  /** Processes that outlived the SIGTERM grace period (`name:pid`), killed then. */
  killed: string[];
  /** Pids still running after SIGKILL (none, normally). */
  stuck: number[];
}

/** The order of SIGTERM: everything else, then kube-apiserver, then etcd (each step waits for the one before). */
const LAST = ['kube-apiserver', 'etcd'];
/** Stopped with SIGKILL at once: kube-scheduler v1.24 with --leader-elect=false stops serving on SIGTERM, then hangs. */
const KILL_AT_ONCE = ['kube-scheduler'];

/**
 * SIGKILL to the pods' processes (a container's pid 1 often ignores SIGTERM,
 * and nothing in them needs a goodbye); SIGTERM to the cluster's own in LAST's
 * order: kube-apiserver's goodbye (its endpoint out of the `kubernetes`
 * Service) writes to etcd, and kube-scheduler's talks to kube-apiserver; each
 * waited in vain when all stopped at once. SIGKILL to what outlives `graceMs`
 * at any step.
 */
export async function stopAll(state: ClusterState, netns: string[] = [], graceMs = 5000): Promise<StopResult> {
  const pidsOf = (name: string): Set<number> => new Set(state.nodes.flatMap((n) => n.processes.filter((p) => p.name === name).map((p) => p.pid)));
  for (const dir of state.cgroups) for (const pid of cgroupPids(dir)) signal(pid, 'SIGKILL');
  for (const name of KILL_AT_ONCE) for (const pid of pidsOf(name)) signal(pid, 'SIGKILL');
  const killed: string[] = [];
  const terminate = async (pids: () => number[]): Promise<void> => {
    for (const pid of pids()) signal(pid, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while (pids().length > 0 && Date.now() < deadline) await sleep(100);
    for (const pid of pids()) {
      killed.push(`${commandName(pid)}:${pid}`);
      signal(pid, 'SIGKILL');
    }
  };
  for (let i = 0; i <= LAST.length; i++) {
    const later = new Set(LAST.slice(i).flatMap((name) => [...pidsOf(name)]));
    await terminate(() => clusterPids(state, netns).filter((pid) => !later.has(pid)));
  }
  // Kill until nothing is left: a shim may start a process while we kill (bounded: 50 rounds).
  for (let round = 0; round < 50; round++) {
    const left = clusterPids(state, netns);
    if (left.length === 0) return { killed, stuck: [] };
    for (const pid of left) signal(pid, 'SIGKILL');
    await sleep(100);
  }
  return { killed, stuck: clusterPids(state, netns) };
}

/** The lines of /proc/self/mountinfo whose mount point is `dir` or below it. */
export function mountsUnder(dirs: string[]): string[] {
  const lines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  return lines.filter((line) => {
    const mountPoint = line.split(' ')[4];
    return mountPoint !== undefined && dirs.some((d) => mountPoint === d || mountPoint.startsWith(`${d}/`));
  });
}
