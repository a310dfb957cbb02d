// Figures of the local cluster (issue 34 item 8): our server's and agents'
// memory and CPU as each node's kubelet reports them in /stats/summary
// (through kube-apiserver, so through the tunnel for edge nodes), beside the
// kubelet's and containerd's own. The kubelets here have no system
// containers but `pods` (no --kubelet-cgroups/--runtime-cgroups), so those
// two come from /proc: RSS, and utime+stime.

import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { mustKubectl } from '../../hack/cluster/kubectl.js';
import type { ClusterState } from '../../hack/cluster/state.js';

/** One thing measured on one node: CPU time used so far (ns) and memory now (bytes). */
interface Reading {
  node: string;
  what: string;
  /** workingSet (stats/summary) or RSS (/proc). */
  memoryKind: 'workingSet' | 'RSS';
  /** When it was read (stats/summary's own time: cAdvisor refreshes a container's figures every 10-15 s). */
  atMs: number;
  cpuNs: number;
  memoryBytes: number;
}

export interface ResourceSample {
  readings: Reading[];
}

interface Summary {
  pods?: {
    podRef: { name: string; namespace: string };
    containers?: { name: string; cpu?: { time?: string; usageCoreNanoSeconds?: number }; memory?: { workingSetBytes?: number } }[];
  }[];
}

/** The kernel's clock ticks per second for /proc/<pid>/stat (USER_HZ: 100 on Linux). */
const USER_HZ = 100;

function procReading(node: string, what: string, pid: number): Reading | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // Fields 14 and 15 of stat (utime, stime); the slice starts at field 3.
    const ticks = Number(fields[11]) + Number(fields[12]);
    const rssKB = Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
    return { node, what, memoryKind: 'RSS', atMs: Date.now(), cpuNs: (ticks * 1e9) / USER_HZ, memoryBytes: rssKB * 1024 };
  } catch {
    return undefined;
  }
}

/** Every node's yurt-tunnel containers (stats/summary), kubelet and containerd (/proc), now. */
export async function sampleResources(state: ClusterState): Promise<ResourceSample> {
  const readings: Reading[] = [];
  for (const node of state.nodes) {
    const summary = JSON.parse(await mustKubectl(['get', '--raw', `/api/v1/nodes/${node.name}/proxy/stats/summary`])) as Summary;
    for (const pod of summary.pods ?? []) {
      if (pod.podRef.namespace !== 'kube-system' || !pod.podRef.name.startsWith('yurt-tunnel-')) continue;
      for (const c of pod.containers ?? []) {
        const { time, usageCoreNanoSeconds } = c.cpu ?? {};
        if (time === undefined || usageCoreNanoSeconds === undefined || c.memory?.workingSetBytes === undefined) continue;
        readings.push({
          node: node.name,
          what: c.name,
          memoryKind: 'workingSet',
          atMs: Date.parse(time),
          cpuNs: usageCoreNanoSeconds,
          memoryBytes: c.memory.workingSetBytes,
        });
      }
    }
    for (const name of ['kubelet', 'containerd']) {
      const proc = node.processes.find((p) => p.name === name);
      const r = proc === undefined ? undefined : procReading(node.name, name, proc.pid);
      if (r !== undefined) readings.push(r);
    }
  }
  return { readings };
}

/** A sample after `before` in which every reading is newer (cAdvisor refreshed it): tries for up to `ms`, then takes what it has. */
export async function sampleResourcesAfter(state: ClusterState, before: ResourceSample, ms = 15_000): Promise<ResourceSample> {
  const deadline = Date.now() + ms;
  for (;;) {
    const after = await sampleResources(state);
    const fresh = before.readings.every((b) => after.readings.some((a) => a.node === b.node && a.what === b.what && a.atMs > b.atMs));
    if (fresh || Date.now() > deadline) return after;
    await sleep(2000);
  }
}

export interface ResourceFigure {
  node: string;
  what: string;
  memory: string;
  /** Average CPU between the two readings, in millicores. */
  cpuMillicores: number;
  /** Over how long (the readings' own times). */
  overSeconds: number;
}

/**
 * Memory at `after` and the CPU used between the samples, for what both saw
 * at different times (a container that restarted between them, or whose
 * figures were not refreshed meanwhile, is left out).
 */
export function resourceFigures(before: ResourceSample, after: ResourceSample): ResourceFigure[] {
  const figures: ResourceFigure[] = [];
  for (const a of after.readings) {
    const b = before.readings.find((r) => r.node === a.node && r.what === a.what);
    if (b === undefined || a.cpuNs < b.cpuNs || a.atMs <= b.atMs) continue;
    const intervalNs = (a.atMs - b.atMs) * 1e6;
    figures.push({
      node: a.node,
      what: a.what,
      memory: `${(a.memoryBytes / 2 ** 20).toFixed(0)} MiB ${a.memoryKind}`,
      cpuMillicores: Math.round(((a.cpuNs - b.cpuNs) / intervalNs) * 1000),
      overSeconds: Math.round((a.atMs - b.atMs) / 1000),
    });
  }
  return figures;
}
