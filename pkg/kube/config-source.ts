// Where the Kubernetes client configuration comes from (kubeconfig, the
// service-account token with --apiserver-addr, in-cluster, the kubelet's
// kubeconfig). Kept apart from client.ts so that choosing a source does not
// load @kubernetes/client-node: an agent or server without a cluster never
// loads it (it costs ~75 MB of RSS).

import { existsSync } from 'node:fs';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** Where kubelet keeps its kubeconfig; an agent with no other source uses the node's identity. */
export const KUBELET_KUBECONFIG = '/etc/kubernetes/kubelet.conf';

export type KubeConfigSource =
  { kind: 'kubeconfig'; path: string } | { kind: 'apiserver-addr'; address: string; serviceAccountDir: string } | { kind: 'in-cluster' };

/** True when running in a pod that has a service account mounted. */
export function inCluster(serviceAccountDir = SERVICE_ACCOUNT_DIR): boolean {
  return process.env.KUBERNETES_SERVICE_HOST !== undefined && existsSync(`${serviceAccountDir}/token`);
}

/**
 * The server's source: --kube-config, else the in-cluster environment, else
 * none (local mode).
 */
export function serverKubeConfigSource(kubeConfig: string | undefined): KubeConfigSource | undefined {
  if (kubeConfig !== undefined && kubeConfig !== '') return { kind: 'kubeconfig', path: kubeConfig };
  if (inCluster()) return { kind: 'in-cluster' };
  return undefined;
}

/**
 * The agent's source, as OpenYurt's agent: --kube-config, else --apiserver-addr
 * with the service-account token, else the kubelet's kubeconfig when present.
 */
export function agentKubeConfigSource(opts: {
  kubeConfig?: string;
  apiserverAddr?: string;
  serviceAccountDir?: string;
  kubeletKubeConfig?: string;
}): KubeConfigSource | undefined {
  if (opts.kubeConfig !== undefined && opts.kubeConfig !== '') return { kind: 'kubeconfig', path: opts.kubeConfig };
  if (opts.apiserverAddr !== undefined && opts.apiserverAddr !== '') {
    return { kind: 'apiserver-addr', address: opts.apiserverAddr, serviceAccountDir: opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR };
  }
  const kubelet = opts.kubeletKubeConfig ?? KUBELET_KUBECONFIG;
  if (existsSync(kubelet)) return { kind: 'kubeconfig', path: kubelet };
  return undefined;
}

export function describeSource(source: KubeConfigSource): string {
  switch (source.kind) {
    case 'kubeconfig':
      return `kubeconfig ${source.path}`;
    case 'in-cluster':
      return 'in-cluster service account';
    case 'apiserver-addr':
      return `--apiserver-addr ${source.address} with the service-account token in ${source.serviceAccountDir}`;
  }
}
