// The optional second cloud node (topology.ts CLOUD_2), added to a running
// cluster: a server with two replicas runs on the host network, and one node
// holds one replica only (host ports), so `kubectl rollout restart` of two
// replicas needs a second node the server may run on. Labelled as a control
// plane node too (the egress-selector and iptables overlays pin the server
// there), though it runs no control plane: only containerd, the kubelet and
// kube-proxy. `down` removes it with the rest.

import type { ClusterBinaries } from './binaries.js';
import { busyboxArchive, imageBaseName, importImage, LOCAL_IMAGE, ourImageArchive } from './images.js';
import { mustKubectl } from './kubectl.js';
import { makeSecondCloudNetwork } from './network.js';
import { prepareNode, startNode, waitNodesReady } from './nodes.js';
import type { ClusterState } from './state.js';
import { CLOUD_2 } from './topology.js';

export async function addSecondCloudNode(state: ClusterState, bins: ClusterBinaries): Promise<void> {
  if (state.nodes.some((n) => n.name === CLOUD_2.name)) return;
  await makeSecondCloudNetwork(state);
  const node = await prepareNode(state, CLOUD_2);
  await startNode(state, node, CLOUD_2, bins, await busyboxArchive());
  await importImage(node, await ourImageArchive(), imageBaseName(LOCAL_IMAGE));
  await waitNodesReady([CLOUD_2], 120_000);
  await mustKubectl(['label', 'node', CLOUD_2.name, 'node-role.kubernetes.io/control-plane=', '--overwrite']);
}
