// The control plane, inside the cloud node's namespaces: etcd and
// kube-apiserver (on the cloud address, Node,RBAC, the admission defaults),
// kube-controller-manager (every default controller, CSR signing with the
// cluster CA) and kube-scheduler.

import { join } from 'node:path';
import type { ClusterBinaries } from './binaries.js';
import { CONTROL_PLANE_FILES as F } from './certs.js';
import { startInNode, stopInNode } from './holder.js';
import { alive } from './procs.js';
import { kubectl, waitFor } from './kubectl.js';
import { STATE_DIR, type ClusterState, type NodeState } from './state.js';
import { APISERVER_PORT, CLOUD_ADDRESS, CLUSTER_CIDR, SERVICE_CIDR } from './topology.js';

/**
 * kube-apiserver's flags; `extra` (e.g. --egress-selector-config-file for a
 * route) are appended, and one named `--flag=` with no value drops that flag
 * (`--kubelet-certificate-authority=` for the iptables route).
 */
export function apiserverArgs(extra: string[] = []): string[] {
  const name = (arg: string): string => arg.split('=')[0]!;
  const dropped = new Set(extra.filter((a) => /^--[^=]+=$/.test(a)).map(name));
  const args = [
    '--etcd-servers=http://127.0.0.1:2379',
    `--secure-port=${APISERVER_PORT}`,
    '--bind-address=0.0.0.0',
    `--advertise-address=${CLOUD_ADDRESS}`,
    `--cert-dir=${join(STATE_DIR, 'apiserver-certs')}`,
    `--tls-cert-file=${F.apiserver}`,
    `--tls-private-key-file=${F.apiserverKey}`,
    `--client-ca-file=${F.ca}`,
    `--service-account-key-file=${F.serviceAccountKey}`,
    `--service-account-signing-key-file=${F.serviceAccountKey}`,
    '--service-account-issuer=https://kubernetes.default.svc',
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    '--authorization-mode=Node,RBAC',
    '--allow-privileged=true',
    `--kubelet-client-certificate=${F.kubeletClient}`,
    `--kubelet-client-key=${F.kubeletClientKey}`,
    `--kubelet-certificate-authority=${F.ca}`,
    // No Hostname: a node's name resolves nowhere here (the DNS route brings its own resolver).
    '--kubelet-preferred-address-types=InternalIP',
  ];
  return [...args.filter((a) => !dropped.has(name(a))), ...extra.filter((a) => !/^--[^=]+=$/.test(a))];
}

export async function startControlPlane(state: ClusterState, cloud: NodeState, bins: ClusterBinaries): Promise<void> {
  startInNode(state, cloud, 'etcd', bins.etcd, [
    '--name=default',
    `--data-dir=${join(STATE_DIR, 'etcd')}`,
    '--listen-client-urls=http://127.0.0.1:2379',
    '--advertise-client-urls=http://127.0.0.1:2379',
    '--listen-peer-urls=http://127.0.0.1:2380',
    '--initial-advertise-peer-urls=http://127.0.0.1:2380',
    '--initial-cluster=default=http://127.0.0.1:2380',
  ]);
  startInNode(state, cloud, 'kube-apiserver', bins.kubeAPIServer, apiserverArgs());
  await waitFor('kube-apiserver /readyz', 90_000, async () =>
    (await kubectl(['get', '--raw', '/readyz'], { timeoutMs: 10_000 })).code === 0 ? true : undefined,
  );
  const kubeconfig = (path: string): string[] => [`--kubeconfig=${path}`, `--authentication-kubeconfig=${path}`, `--authorization-kubeconfig=${path}`];
  startInNode(state, cloud, 'kube-controller-manager', bins.kubeControllerManager, [
    ...kubeconfig(F.controllerManagerKubeconfig),
    `--cluster-signing-cert-file=${F.ca}`,
    `--cluster-signing-key-file=${F.caKey}`,
    `--root-ca-file=${F.ca}`,
    `--service-account-private-key-file=${F.serviceAccountKey}`,
    '--use-service-account-credentials=true',
    '--controllers=*',
    `--cluster-cidr=${CLUSTER_CIDR}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    '--leader-elect=false',
    '--bind-address=127.0.0.1',
  ]);
  startInNode(state, cloud, 'kube-scheduler', bins.kubeScheduler, [...kubeconfig(F.schedulerKubeconfig), '--leader-elect=false', '--bind-address=127.0.0.1']);
}

async function startAPIServer(state: ClusterState, cloud: NodeState, bins: ClusterBinaries, extra: string[]): Promise<void> {
  const proc = startInNode(state, cloud, 'kube-apiserver', bins.kubeAPIServer, apiserverArgs(extra));
  await waitFor('kube-apiserver /readyz', 90_000, async () => {
    if (!alive(proc.pid)) throw new Error(`kube-apiserver exited while starting; see ${proc.log}`);
    return (await kubectl(['get', '--raw', '/readyz'], { timeoutMs: 10_000 })).code === 0 ? true : undefined;
  });
}

/** Restarts kube-apiserver with `extra` flags (a route's, as apiserverArgs takes them); etcd keeps every object. */
export async function restartAPIServer(state: ClusterState, cloud: NodeState, bins: ClusterBinaries, extra: string[]): Promise<void> {
  await stopInNode(state, cloud, 'kube-apiserver');
  await startAPIServer(state, cloud, bins, extra);
}
