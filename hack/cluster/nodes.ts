// A node, from nothing to a kubelet: its cgroup root, mount-namespace holder
// and credentials first (prepareNode), then containerd with the images and
// the kubelet and kube-proxy (startNode); and the wait for Ready.

import type { ClusterBinaries } from './binaries.js';
import { makeCgroupRoot } from './cgroups.js';
import { writeNodePKI } from './certs.js';
import { startContainerd, writeContainerdConfig } from './containerd.js';
import { startHolder } from './holder.js';
import { BUSYBOX_NAME, importImage } from './images.js';
import { startKubelet, startKubeProxy } from './kubelet.js';
import { kubectl, waitFor } from './kubectl.js';
import type { ClusterState, NodeState } from './state.js';
import { EDGE_LABEL, type NodeSpec } from './topology.js';

export async function prepareNode(state: ClusterState, spec: NodeSpec): Promise<NodeState> {
  makeCgroupRoot(state, spec.name);
  const node = await startHolder(state, spec);
  writeNodePKI(spec);
  return node;
}

export async function startNode(state: ClusterState, node: NodeState, spec: NodeSpec, bins: ClusterBinaries, busybox: string): Promise<void> {
  await startContainerd(state, node, await writeContainerdConfig(spec));
  // The sandbox image first: the kubelet's first pod needs it.
  await importImage(node, busybox, BUSYBOX_NAME);
  startKubelet(state, node, spec, bins);
  startKubeProxy(state, node, spec, bins);
}

export interface NodeView {
  name: string;
  ready: boolean;
  edge: string | undefined;
  internalIP: string | undefined;
}

interface NodeList {
  items: {
    metadata: { name: string; labels?: Record<string, string> };
    status?: { addresses?: { type: string; address: string }[]; conditions?: { type: string; status: string }[] };
  }[];
}

/** The Nodes as kube-apiserver has them (empty when it does not answer). */
export async function listNodes(): Promise<NodeView[]> {
  const r = await kubectl(['get', 'nodes', '-o', 'json'], { timeoutMs: 10_000 });
  if (r.code !== 0) return [];
  return (JSON.parse(r.stdout) as NodeList).items.map((n) => ({
    name: n.metadata.name,
    ready: n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false,
    edge: n.metadata.labels?.[EDGE_LABEL],
    internalIP: n.status?.addresses?.find((a) => a.type === 'InternalIP')?.address,
  }));
}

export async function waitNodesReady(specs: NodeSpec[], timeoutMs: number): Promise<NodeView[]> {
  return waitFor(
    `nodes ${specs.map((s) => s.name).join(', ')} Ready`,
    timeoutMs,
    async () => {
      const nodes = await listNodes();
      return specs.every((s) => nodes.some((n) => n.name === s.name && n.ready)) ? nodes : undefined;
    },
    async () => JSON.stringify(await listNodes()),
  );
}
