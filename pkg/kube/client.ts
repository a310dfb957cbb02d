// The Kubernetes client, from the first of: a kubeconfig file; the API
// server's address with this pod's service-account token (the agent's
// --apiserver-addr); the in-cluster environment; and, for the agent, the
// kubelet's own kubeconfig. Everything else in pkg/kube takes a KubeClient.

import { existsSync } from 'node:fs';
import {
  CertificatesV1Api,
  CoordinationV1Api,
  CoreV1Api,
  KubeConfig,
  Watch,
} from '@kubernetes/client-node';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
/** Where kubelet keeps its kubeconfig; an agent with no other source uses the node's identity. */
export const KUBELET_KUBECONFIG = '/etc/kubernetes/kubelet.conf';

export type KubeConfigSource =
  | { kind: 'kubeconfig'; path: string }
  | { kind: 'apiserver-addr'; address: string; serviceAccountDir: string }
  | { kind: 'in-cluster' };

export interface KubeClient {
  readonly config: KubeConfig;
  /** Where the client reaches the API server, for log lines. */
  readonly server: string;
  /** How the configuration was found, for log lines. */
  readonly source: KubeConfigSource;
  readonly core: CoreV1Api;
  readonly coordination: CoordinationV1Api;
  readonly certificates: CertificatesV1Api;
  readonly watch: Watch;
}

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

function loadConfig(source: KubeConfigSource): KubeConfig {
  const kc = new KubeConfig();
  switch (source.kind) {
    case 'kubeconfig':
      kc.loadFromFile(source.path);
      break;
    case 'in-cluster':
      kc.loadFromCluster();
      break;
    case 'apiserver-addr': {
      const server = /^https?:\/\//.test(source.address) ? source.address : `https://${source.address}`;
      kc.loadFromOptions({
        clusters: [{ name: 'cluster', server, caFile: `${source.serviceAccountDir}/ca.crt`, skipTLSVerify: false }],
        // The token file is read again as it changes (projected tokens rotate).
        users: [{ name: 'service-account', authProvider: { name: 'tokenFile', config: { tokenFile: `${source.serviceAccountDir}/token` } } }],
        contexts: [{ name: 'default', cluster: 'cluster', user: 'service-account' }],
        currentContext: 'default',
      });
      break;
    }
  }
  if (kc.getCurrentCluster() === null) {
    throw new Error(`${describeSource(source)} names no current cluster (set current-context)`);
  }
  return kc;
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

/** Builds the clients; throws naming the source when the configuration cannot be read. */
export function createKubeClient(source: KubeConfigSource): KubeClient {
  let config: KubeConfig;
  try {
    config = loadConfig(source);
  } catch (err: unknown) {
    throw new Error(`cannot load the Kubernetes client configuration from ${describeSource(source)}: ${(err as Error).message}`, {
      cause: err,
    });
  }
  return {
    config,
    server: config.getCurrentCluster()!.server,
    source,
    core: config.makeApiClient(CoreV1Api),
    coordination: config.makeApiClient(CoordinationV1Api),
    certificates: config.makeApiClient(CertificatesV1Api),
    watch: new Watch(config),
  };
}
