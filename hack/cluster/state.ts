// Where the local cluster keeps what `up` made, so that `status` and `down`
// work from another process: one folder (YT_CLUSTER_DIR, default
// /var/tmp/yurt-tunnel-cluster) with state.json, the PKI, kubeconfigs, each
// node's private folders and every process's log. What does not change
// between runs (image archives) is cached beside it (YT_CLUSTER_CACHE), keyed
// by content.

import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const STATE_DIR = process.env.YT_CLUSTER_DIR ?? '/var/tmp/yurt-tunnel-cluster';
export const CACHE_DIR = process.env.YT_CLUSTER_CACHE ?? '/var/tmp/yurt-tunnel-cache';

export const STATE_FILE = join(STATE_DIR, 'state.json');
export const ADMIN_KUBECONFIG = join(STATE_DIR, 'admin.kubeconfig');
/** A kubectl that runs in the cloud namespace with the admin kubeconfig. */
export const KUBECTL_WRAPPER = join(STATE_DIR, 'kubectl');
export const LOG_DIR = join(STATE_DIR, 'logs');

export interface ProcessState {
  name: string;
  pid: number;
  log: string;
}

export interface NodeState {
  name: string;
  netns: string;
  address: string;
  /** The process that holds the node's mount namespace; every process of the node is started inside it. */
  holderPid: number;
  /** /proc/<pid>/ns/mnt and ns/net of the holder (`mnt:[4026532…]`), to find the node's processes. */
  mntNS: string;
  netNS: string;
  processes: ProcessState[];
}

export interface ClusterState {
  startedAt: string;
  /** Network namespaces made (deleted by `down`). */
  netns: string[];
  /** Folders made in the root file system as mount points (removed by `down` when empty). */
  mountPoints: string[];
  /** cgroup v1 folders made (kubelets' cgroupRoot), removed by `down` with all they hold. */
  cgroups: string[];
  nodes: NodeState[];
  /** The route deployed, once deployed. */
  route?: string;
}

export function emptyState(): ClusterState {
  return { startedAt: new Date().toISOString(), netns: [], mountPoints: [], cgroups: [], nodes: [] };
}

export function readState(): ClusterState | undefined {
  if (!existsSync(STATE_FILE)) return undefined;
  return JSON.parse(readFileSync(STATE_FILE, 'utf8')) as ClusterState;
}

/** Written after every step of `up`, so that `down` can undo a half-made cluster. */
export function writeState(state: ClusterState): void {
  writeFileSync(`${STATE_FILE}.tmp`, JSON.stringify(state, null, 2) + '\n');
  renameSync(`${STATE_FILE}.tmp`, STATE_FILE);
}

export function nodeDir(node: string): string {
  return join(STATE_DIR, 'nodes', node);
}
