// The kubelets' cgroupRoot (`/ytc-<node>`), made beforehand in every cgroup v1
// hierarchy (these machines have no systemd; the kubelet uses cgroupfs), with
// cpuset's cpus and mems copied from the parent, which a new cpuset lacks.
// `down` removes them deepest first, once no process is left in them.

import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PREFIX } from './topology.js';
import { writeState, type ClusterState } from './state.js';

const CGROUP_FS = '/sys/fs/cgroup';

/** The mounted v1 hierarchies (cpu, memory, ..., name=systemd), not the unified one. */
function hierarchies(): string[] {
  if (!existsSync(CGROUP_FS)) return [];
  return readdirSync(CGROUP_FS)
    .map((name) => join(CGROUP_FS, name))
    .filter((dir) => !dir.endsWith('/unified') && existsSync(join(dir, 'cgroup.procs')));
}

export function cgroupRoot(node: string): string {
  return `/${PREFIX}${node}`;
}

export function makeCgroupRoot(state: ClusterState, node: string): void {
  for (const h of hierarchies()) {
    const dir = join(h, cgroupRoot(node));
    if (!existsSync(dir)) {
      mkdirSync(dir);
      state.cgroups.push(dir);
      writeState(state);
    }
    if (h.endsWith('/cpuset')) {
      for (const file of ['cpuset.cpus', 'cpuset.mems']) writeFileSync(join(dir, file), readFileSync(join(h, file)));
    }
  }
}

/** Every process in `dir` and the cgroups below it. */
export function cgroupPids(dir: string): number[] {
  if (!existsSync(dir)) return [];
  const pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map(Number);
  for (const name of readdirSync(dir)) {
    const sub = join(dir, name);
    if (statSync(sub).isDirectory()) pids.push(...cgroupPids(sub));
  }
  return pids;
}

/** Removes `dir` and the cgroups below it, deepest first; they must hold no process. */
export function removeCgroup(dir: string): void {
  if (!existsSync(dir)) return;
  for (const name of readdirSync(dir)) {
    const sub = join(dir, name);
    if (statSync(sub).isDirectory()) removeCgroup(sub);
  }
  rmdirSync(dir);
}
