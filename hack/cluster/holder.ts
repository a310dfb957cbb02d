// Each node gets its own mount namespace beside its network namespace: one
// long-lived holder (`unshare --mount --propagation slave` inside the node's
// network namespace) bind-mounts the node's private folders over the paths a
// node owns (/etc/kubernetes, /var/lib/kubelet, /run/containerd, ...), and
// every process of the node is started inside it (`nsenter -t <holder> -m -n`).
// So a pod's hostPath such as /etc/kubernetes/kubelet.conf resolves to that
// node's file, containerd and the kubelet see each other's mounts (pod volumes
// the kubelet mounts), and once every process of the node is gone, its mounts
// go with the namespace.

import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run, type RunOptions } from '../image.js';
import { alive } from './procs.js';
import { LOG_DIR, nodeDir, writeState, type ClusterState, type NodeState, type ProcessState } from './state.js';
import type { NodeSpec } from './topology.js';

/**
 * The paths each node has to itself, and the folder name that holds them under
 * its node folder. All of /var/lib, so that any hostPath there (the tunnel's
 * certificate folders, /var/lib/kubelet) is the node's own and never the
 * machine's; of /etc and /run only what a node owns.
 */
export const PRIVATE_PATHS: Record<string, string> = {
  '/etc/kubernetes': 'etc-kubernetes',
  '/etc/cni/net.d': 'etc-cni-net.d',
  '/var/lib': 'var-lib',
  '/run/containerd': 'run-containerd',
  // containerd's CRI bind-mounts pod network namespaces here: kept out of the root's /run/netns.
  '/run/netns': 'run-netns',
  '/var/log/pods': 'var-log-pods',
  '/var/log/containers': 'var-log-containers',
};

/**
 * Mounted inside the private ones, each a tmpfs of the node's own: containerd's
 * images and snapshots (about 600 MB a node with our image), freed at once when
 * the node's mount namespace ends, where deleting them from disk took 35 s.
 */
const TMPFS_PATHS = ['/var/lib/containerd'];

/** Where `path` (a node-private path or one below it) of `node` is, seen from the root mount namespace. */
export function privatePath(node: string, path: string): string {
  const top = Object.keys(PRIVATE_PATHS).find((p) => path === p || path.startsWith(`${p}/`));
  if (top === undefined) throw new TypeError(`${path} is not below a node-private path`);
  return join(nodeDir(node), PRIVATE_PATHS[top]!, path.slice(top.length));
}

function nsLink(pid: number, kind: 'mnt' | 'net'): string {
  return readlinkSync(`/proc/${pid}/ns/${kind}`);
}

/** Makes the mount points missing in the root file system (recorded, so that `down` removes them). */
function ensureMountPoints(state: ClusterState): void {
  for (const path of Object.keys(PRIVATE_PATHS)) {
    if (existsSync(path)) continue;
    // Record the topmost folder made, so that `down` removes what it made and nothing more.
    let top = path;
    while (!existsSync(join(top, '..'))) top = join(top, '..');
    mkdirSync(path, { recursive: true });
    state.mountPoints.push(top);
    writeState(state);
  }
}

/** Starts the holder of `spec`'s mount namespace and records it in `state`. */
export async function startHolder(state: ClusterState, spec: NodeSpec): Promise<NodeState> {
  ensureMountPoints(state);
  const binds: [string, string][] = Object.keys(PRIVATE_PATHS).map((path) => [privatePath(spec.name, path), path]);
  for (const [source] of binds) mkdirSync(source, { recursive: true });
  for (const path of TMPFS_PATHS) mkdirSync(privatePath(spec.name, path), { recursive: true });
  const script = [
    'set -e',
    ...binds.map(([source, target]) => `mount --bind '${source}' '${target}'`),
    ...TMPFS_PATHS.map((target) => `mount -t tmpfs -o mode=0711 ytc-${spec.name} '${target}'`),
    'echo ready',
    // The holder only holds: every process of the node is started beside it.
    'exec sleep infinity',
  ].join('\n');
  const log = join(LOG_DIR, `${spec.name}-holder.log`);
  const fd = openSync(log, 'a');
  const child = spawn('nsenter', [`--net=/run/netns/${spec.netns}`, '--', 'unshare', '--mount', '--propagation', 'slave', '--', 'sh', '-c', script], {
    detached: true,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  child.unref();
  const pid = child.pid;
  if (pid === undefined) throw new Error(`cannot start the mount-namespace holder of node ${spec.name}`);
  const deadline = Date.now() + 10_000;
  while (!readFileSync(log, 'utf8').includes('ready')) {
    if (child.exitCode !== null || Date.now() > deadline) {
      throw new Error(`the mount-namespace holder of node ${spec.name} did not start:\n${readFileSync(log, 'utf8')}`);
    }
    await sleep(50);
  }
  const node: NodeState = {
    name: spec.name,
    netns: spec.netns,
    address: spec.address,
    holderPid: pid,
    mntNS: nsLink(pid, 'mnt'),
    netNS: nsLink(pid, 'net'),
    processes: [],
  };
  state.nodes.push(node);
  writeState(state);
  return node;
}

/** Starts `bin args` inside `node`'s mount and network namespaces, detached (it outlives `up`); output to logs/<node>-<name>.log. */
export function startInNode(state: ClusterState, node: NodeState, name: string, bin: string, args: string[], env: NodeJS.ProcessEnv = {}): ProcessState {
  const log = join(LOG_DIR, `${node.name}-${name}.log`);
  const fd = openSync(log, 'a');
  const child = spawn('nsenter', ['-t', String(node.holderPid), '-m', '-n', '--', bin, ...args], {
    detached: true,
    stdio: ['ignore', fd, fd],
    env: { ...process.env, ...env },
  });
  closeSync(fd);
  child.unref();
  if (child.pid === undefined) throw new Error(`cannot start ${name} on node ${node.name}`);
  const proc = { name, pid: child.pid, log };
  node.processes.push(proc);
  writeState(state);
  return proc;
}

/** Runs a command to its end inside `node`'s mount and network namespaces; resolves its stdout. */
export function runInNode(node: Pick<NodeState, 'holderPid'>, command: string, args: string[], options: RunOptions = {}): Promise<string> {
  return run('nsenter', ['-t', String(node.holderPid), '-m', '-n', '--', command, ...args], options);
}

/** Stops what startInNode started on `node` as `name` (SIGTERM, SIGKILL after 10 s) and forgets it; nothing when none runs. */
export async function stopInNode(state: ClusterState, node: NodeState, name: string): Promise<void> {
  for (const proc of node.processes.filter((p) => p.name === name)) {
    process.kill(proc.pid, 'SIGTERM');
    for (let i = 0; i < 100 && alive(proc.pid); i++) await sleep(100);
    if (alive(proc.pid)) process.kill(proc.pid, 'SIGKILL');
    for (let i = 0; i < 50 && alive(proc.pid); i++) await sleep(100);
    node.processes.splice(node.processes.indexOf(proc), 1);
    writeState(state);
  }
}
