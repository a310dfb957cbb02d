// Finding the cluster's processes: those `up` started (state.json), every
// process in a node's mount or network namespace (containerd's shims), and
// every process in the kubelets' cgroups (the containers, which have
// namespaces of their own).

import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
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

function nsLink(pid: string, kind: string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${kind}`);
  } catch {
    return undefined;
  }
}

/** The cluster's namespaces (`mnt:[…]`, `net:[…]`), each held open by a file descriptor until release(). */
export interface HeldNamespaces {
  links: ReadonlySet<string>;
  release(): void;
}

/**
 * Holds the cluster's namespaces open. The kernel gives a freed namespace's number to the next namespace
 * made anywhere (every `ip netns exec` and `unshare --mount` makes one), so once a node's last process has
 * ended, its recorded number may name a stranger's namespace: a probe of a test running beside `down` was
 * killed so. A namespace held open is not freed, so a process in it is the node's. Each is held through a
 * process recorded in `state` (the holder or one `up` started) still in it, or through its /run/netns name;
 * one that cannot be held any more is not looked in (its processes are gone, or found by pid or cgroup).
 */
export function holdNamespaces(state: ClusterState, netnsNames: string[] = []): HeldNamespaces {
  const fds: number[] = [];
  const links = new Set<string>();
  /** Holds the namespace at `path` if it is `link` (any, for undefined); true when held. */
  const hold = (path: string, kind: 'mnt' | 'net', link?: string): boolean => {
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch {
      return false;
    }
    // The descriptor's inode is the namespace's number: it says what was opened, even if a pid was reused meanwhile.
    const opened = `${kind}:[${fstatSync(fd).ino}]`;
    if (link !== undefined && opened !== link) {
      closeSync(fd);
      return false;
    }
    fds.push(fd);
    links.add(opened);
    return true;
  };
  for (const node of state.nodes) {
    const pids = [node.holderPid, ...node.processes.map((p) => p.pid)];
    for (const [kind, link] of [
      ['mnt', node.mntNS],
      ['net', node.netNS],
    ] as const) {
      pids.some((pid) => nsLink(String(pid), kind) === link && hold(`/proc/${pid}/ns/${kind}`, kind, link));
    }
  }
  // Deleted meanwhile, a name holds nothing, and there is nothing of it to look in.
  for (const name of netnsNames) hold(`/run/netns/${name}`, 'net');
  return {
    links,
    release: () => {
      for (const fd of fds.splice(0)) closeSync(fd);
    },
  };
}

/** Every running process that belongs to the cluster `state` describes, or runs in one of the `held` namespaces. */
export function clusterPids(state: ClusterState, held: HeldNamespaces): number[] {
  const pids = new Set<number>();
  for (const node of state.nodes) {
    pids.add(node.holderPid);
    for (const p of node.processes) pids.add(p.pid);
  }
  for (const dir of state.cgroups) for (const pid of cgroupPids(dir)) pids.add(pid);
  if (held.links.size > 0 && existsSync('/proc')) {
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      const mnt = nsLink(pid, 'mnt');
      const net = nsLink(pid, 'net');
      if ((mnt !== undefined && held.links.has(mnt)) || (net !== undefined && held.links.has(net))) pids.add(Number(pid));
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
export async function stopAll(state: ClusterState, netnsNames: string[] = [], graceMs = 5000): Promise<StopResult> {
  const held = holdNamespaces(state, netnsNames);
  try {
    return await stopHeld(state, held, graceMs);
  } finally {
    held.release();
  }
}

async function stopHeld(state: ClusterState, held: HeldNamespaces, graceMs: number): Promise<StopResult> {
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
    await terminate(() => clusterPids(state, held).filter((pid) => !later.has(pid)));
  }
  // Kill until nothing is left: a shim may start a process while we kill (bounded: 50 rounds).
  for (let round = 0; round < 50; round++) {
    const left = clusterPids(state, held);
    if (left.length === 0) return { killed, stuck: [] };
    for (const pid of left) signal(pid, 'SIGKILL');
    await sleep(100);
  }
  return { killed, stuck: clusterPids(state, held) };
}

/** The lines of /proc/self/mountinfo whose mount point is `dir` or below it. */
export function mountsUnder(dirs: string[]): string[] {
  const lines = readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
  return lines.filter((line) => {
    const mountPoint = line.split(' ')[4];
    return mountPoint !== undefined && dirs.some((d) => mountPoint === d || mountPoint.startsWith(`${d}/`));
  });
}
