// The Kubernetes client, from the first of: a kubeconfig file; the API
// server's address with this pod's service-account token (the agent's
// --apiserver-addr); the in-cluster environment; and, for the agent, the
// kubelet's own kubeconfig. Everything else in pkg/kube takes a KubeClient.

import { CertificatesV1Api, CoordinationV1Api, CoreV1Api, KubeConfig, Watch } from '@kubernetes/client-node';
import { describeSource, type KubeConfigSource } from './config-source.js';
import { ConfigError, errorMessage } from '../protocol/errors.js';

// Where the configuration comes from lives in config-source.ts, which does not
// load @kubernetes/client-node (~75 MB of RSS): processes that run without a
// cluster never load it.
export {
  agentKubeConfigSource,
  describeSource,
  inCluster,
  KUBELET_KUBECONFIG,
  serverKubeConfigSource,
  SERVICE_ACCOUNT_DIR,
  type KubeConfigSource,
} from './config-source.js';

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
    throw new ConfigError('YT_ERR_KUBECONFIG', `${describeSource(source)} names no current cluster (set current-context)`);
  }
  return kc;
}

/** Builds the clients; throws naming the source when the configuration cannot be read. */
export function createKubeClient(source: KubeConfigSource): KubeClient {
  let config: KubeConfig;
  try {
    config = loadConfig(source);
  } catch (err: unknown) {
    throw new ConfigError('YT_ERR_KUBECONFIG', `cannot load the Kubernetes client configuration from ${describeSource(source)}: ${errorMessage(err)}`, {
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
