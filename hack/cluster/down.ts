// `npm run cluster -- down`: every process of the cluster ended (SIGTERM, then
// SIGKILL: containers and shims too), which takes each node's mount namespace
// and its mounts with it; the network namespaces deleted (their veths and
// iptables rules go with them); the cgroups, mount points and state folder
// removed. Then it checks that nothing is left and says what is, if anything.
// With nothing up it does nothing and succeeds.

import { existsSync, readdirSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { run } from '../image.js';
import { existingCgroupRoots, removeCgroup } from './cgroups.js';
import { clusterPids, holdNamespaces, mountsUnder, stopAll } from './procs.js';
import { emptyState, readState, STATE_DIR, type ClusterState } from './state.js';
import { ALL_NETNS, CLOUD_2, NODES } from './topology.js';

export interface DownResult {
  /** False when there was nothing to take down. */
  wasUp: boolean;
  /** What is left behind (empty when all is gone). */
  left: string[];
}

async function ourNetns(): Promise<string[]> {
  return (await run('ip', ['netns', 'list']))
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => ALL_NETNS.includes(n));
}

/** What the cluster runs, by command name (a `tail -f` of one of its logs is not the cluster's). */
const OUR_COMMANDS = new Set([
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kubelet',
  'kube-proxy',
  'containerd',
  'containerd-shim-runc-v2',
  'sleep',
]);

/** Processes of the cluster's commands whose command line names the state folder: started by this `up`, or an earlier one whose state is gone. */
function processesNamingState(): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue;
    }
    const command = argv[0]?.split('/').pop() ?? '';
    const cmdline = argv.join(' ');
    if (OUR_COMMANDS.has(command) && cmdline.includes(STATE_DIR)) found.push(`process ${pid}: ${cmdline.slice(0, 120)}`);
  }
  return found;
}

/** What of the cluster is still there. */
export async function leftovers(state: ClusterState): Promise<string[]> {
  const left: string[] = [];
  const held = holdNamespaces(state);
  try {
    for (const pid of clusterPids(state, held)) left.push(`process ${pid}`);
  } finally {
    held.release();
  }
  left.push(...processesNamingState());
  for (const ns of await ourNetns()) left.push(`network namespace ${ns}`);
  const folders = [STATE_DIR, ...state.mountPoints];
  for (const m of mountsUnder(folders)) left.push(`mount ${m.split(' ')[4]}`);
  for (const dir of state.cgroups) if (existsSync(dir)) left.push(`cgroup ${dir}`);
  for (const dir of state.mountPoints) if (existsSync(dir)) left.push(`folder ${dir}`);
  if (existsSync(STATE_DIR)) left.push(`folder ${STATE_DIR}`);
  return left;
}

export async function down(progress: (line: string) => void = () => undefined): Promise<DownResult> {
  const netns = await ourNetns();
  // Without state.json (lost, or an `up` cut short before it wrote it), what the names say is ours.
  const state = readState() ?? { ...emptyState(), netns, cgroups: existingCgroupRoots([...NODES, CLOUD_2].map((n) => n.name)) };
  if (state.nodes.length === 0 && netns.length === 0 && state.cgroups.length === 0 && !existsSync(STATE_DIR)) return { wasUp: false, left: [] };
  const t0 = Date.now();
  const since = (): string => `${((Date.now() - t0) / 1000).toFixed(1)} s`;
  // By their network namespaces too: what an `up` whose state.json is lost left running.
  const { killed, stuck } = await stopAll(state, netns);
  const note = killed.length === 0 ? '' : `; SIGKILL after the SIGTERM grace: ${killed.join(', ')}`;
  progress(stuck.length === 0 ? `processes ended (${since()}${note})` : `processes still running after SIGKILL: ${stuck.join(', ')}`);
  for (const ns of netns) await run('ip', ['netns', 'del', ns]);
  progress(`network namespaces deleted: ${netns.join(', ') || 'none'} (${since()})`);
  for (const dir of state.cgroups) {
    try {
      removeCgroup(dir);
    } catch (err: unknown) {
      progress(`cgroup ${dir} not removed: ${(err as Error).message}`);
    }
  }
  // Nothing of ours should be mounted in the root namespace; if something is, unmount it before removing folders.
  for (const m of mountsUnder([STATE_DIR, ...state.mountPoints]).reverse()) {
    await run('umount', ['-l', m.split(' ')[4]!]).catch((err: unknown) => progress((err as Error).message));
  }
  if (mountsUnder([STATE_DIR]).length === 0) {
    try {
      rmSync(STATE_DIR, { recursive: true, force: true, maxRetries: 3 });
    } catch (err: unknown) {
      // Reported below as a folder left; a second down tries again.
      progress(`${STATE_DIR} not removed: ${(err as Error).message}`);
    }
  }
  progress(`files removed (${since()})`);
  for (const dir of [...state.mountPoints].reverse()) {
    try {
      rmdirSync(dir, { recursive: false });
    } catch (err: unknown) {
      progress(`${dir} not removed: ${(err as Error).message}`);
    }
  }
  const left = await leftovers(state);
  return { wasUp: true, left };
}
