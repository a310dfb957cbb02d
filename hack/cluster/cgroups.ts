// The kubelets' cgroupRoot (`/ytc-<node>`), made beforehand in every cgroup
// hierarchy (these machines have no systemd; the kubelet uses cgroupfs): the
// v1 ones, with cpuset's cpus and mems copied from the parent, which a new
// cpuset lacks, and the unified one, where runc puts the pods as well.
// `down` removes them deepest first, once no process is left in them.

import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PREFIX } from './topology.js';
import { writeState, type ClusterState } from './state.js';

const CGROUP_FS = '/sys/fs/cgroup';

/** The mounted hierarchies: v1 (cpu, memory, ..., name=systemd) and the unified one, where runc puts pods too. */
function hierarchies(): string[] {
  if (!existsSync(CGROUP_FS)) return [];
  return readdirSync(CGROUP_FS)
    .map((name) => join(CGROUP_FS, name))
    .filter((dir) => existsSync(join(dir, 'cgroup.procs')));
}

export function cgroupRoot(node: string): string {
  return `/${PREFIX}${node}`;
}

/** The cgroup roots of `nodes` that exist now, in every hierarchy (what `down` removes when state.json is lost). */
export function existingCgroupRoots(nodes: string[]): string[] {
  return hierarchies()
    .flatMap((h) => nodes.map((n) => join(h, cgroupRoot(n))))
    .filter((dir) => existsSync(dir));
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

/** Every process in `dir` and the cgroups below it (the kubelet may remove one while we read). */
export function cgroupPids(dir: string): number[] {
  let pids: number[];
  let subs: string[];
  try {
    pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8')
      .split('\n')
      .filter((l) => l !== '')
      .map(Number);
    subs = readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => join(dir, e.name));
  } catch (err: unknown) {
    // Gone meanwhile (ENOENT), or being removed (ENODEV).
    if (['ENOENT', 'ENODEV'].includes((err as NodeJS.ErrnoException).code ?? '')) return [];
    throw err;
  }
  for (const sub of subs) pids.push(...cgroupPids(sub));
  return pids;
}

/** Removes `dir` and the cgroups below it, deepest first; they must hold no process. */
export function removeCgroup(dir: string): void {
  if (!existsSync(dir)) return;
  for (const e of readdirSync(dir, { withFileTypes: true })) if (e.isDirectory()) removeCgroup(join(dir, e.name));
  rmdirSync(dir);
}
