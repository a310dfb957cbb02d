// A node's kubelet and kube-proxy, started inside the node's namespaces with
// the credentials certs.ts wrote into its private /etc/kubernetes.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ClusterBinaries } from './binaries.js';
import { cgroupRoot } from './cgroups.js';
import { NODE_FILES } from './certs.js';
import { privatePath, startInNode, stopInNode } from './holder.js';
import { PAUSE_IMAGE } from './images.js';
import { nodeDir, type ClusterState, type NodeState } from './state.js';
import { CLUSTER_CIDR, EDGE_LABEL, type NodeSpec } from './topology.js';

function kubeletConfig(spec: NodeSpec): object {
  return {
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    cgroupDriver: 'cgroupfs',
    cgroupRoot: cgroupRoot(spec.name),
    failSwapOn: false,
    address: '0.0.0.0',
    authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: NODE_FILES.ca } },
    authorization: { mode: 'Webhook' },
    tlsCertFile: NODE_FILES.servingCert,
    tlsPrivateKeyFile: NODE_FILES.servingKey,
    // A shared machine: no eviction or image collection because of what other work fills its disk with.
    evictionHard: { 'memory.available': '50Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    resolvConf: '/etc/resolv.conf',
    podCIDR: spec.podCIDR,
    syncFrequency: '10s',
    nodeStatusUpdateFrequency: '5s',
  };
}

export function startKubelet(state: ClusterState, node: NodeState, spec: NodeSpec, bins: ClusterBinaries): void {
  const config = join(privatePath(spec.name, '/etc/kubernetes'), 'kubelet-config.yaml');
  writeFileSync(config, JSON.stringify(kubeletConfig(spec), null, 2));
  startInNode(state, node, 'kubelet', bins.kubelet, [
    `--config=${NODE_FILES.kubeletConfig}`,
    `--kubeconfig=${NODE_FILES.kubeletKubeconfig}`,
    '--container-runtime=remote',
    '--container-runtime-endpoint=unix:///run/containerd/containerd.sock',
    `--pod-infra-container-image=${PAUSE_IMAGE}`,
    `--node-ip=${spec.address}`,
    `--hostname-override=${spec.name}`,
    `--node-labels=${EDGE_LABEL}=${spec.role === 'edge' ? 'true' : 'false'}`,
    '--v=1',
  ]);
}

export function startKubeProxy(state: ClusterState, node: NodeState, spec: NodeSpec, bins: ClusterBinaries): void {
  const config = join(nodeDir(spec.name), 'kube-proxy.yaml');
  const kubeProxyConfig = {
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    mode: 'iptables',
    clientConnection: { kubeconfig: NODE_FILES.kubeProxyKubeconfig },
    hostnameOverride: spec.name,
    bindAddress: spec.address,
    clusterCIDR: CLUSTER_CIDR,
    // nf_conntrack_max is the machine's, not the namespace's: leave it alone.
    conntrack: { maxPerCore: 0 },
    metricsBindAddress: '127.0.0.1:10249',
  };
  writeFileSync(config, JSON.stringify(kubeProxyConfig, null, 2));
  startInNode(state, node, 'kube-proxy', bins.kubeProxy, [`--config=${config}`, '--v=1']);
}

/** Restarts `node`'s kubelet process (SIGTERM, then the same flags): its pods keep running, as on a real node. */
export async function restartKubelet(state: ClusterState, node: NodeState, spec: NodeSpec, bins: ClusterBinaries): Promise<void> {
  await stopInNode(state, node, 'kubelet');
  startKubelet(state, node, spec, bins);
}
