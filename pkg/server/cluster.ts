// What the server runs when it finds a cluster: the Kubernetes client, Node,
// Pod and tunnel-Service informers, the node resolver they feed, and the
// serving and proxy-client certificates from CertificateSigningRequests
// (renewed when the Services change the wanted addresses). The data path does
// not wait for the informers; it waits only for its certificates, which come
// from the stores in --cert-dir at once after the first run. The CSR approver
// (--enable-csr-approver) runs here too, so the server's first CSRs find it.

import type { V1Node, V1Pod, V1Service } from '../kube/types.js';
import {
  CertificateManager,
  CLIENT_USAGES,
  KUBE_APISERVER_CLIENT_SIGNER,
  KUBELET_SERVING_SIGNER,
  SERVING_USAGES,
  type CertificateTemplate,
} from '../certs/certificate-manager.js';
import { SERVER_COMMON_NAME, SERVER_ORGANIZATION, PROXY_CLIENT_COMMON_NAME, YURTTUNNEL_ORGANIZATION } from '../certs/local-store.js';
import { PemFileStore } from '../certs/pem-file-store.js';
import { readPemFile } from '../certs/read-pem.js';
import { ConfigError } from '../protocol/errors.js';
import type { CertKeyPair } from '../certs/pki.js';
import type { EdgeNodeTest, NodeResolver } from '../nodes/node-resolver.js';
import type { Logger } from '../log/logger.js';
import { createKubeClient, describeSource, type KubeClient, type KubeConfigSource } from '../kube/client.js';
import { CsrApprover, DEFAULT_SERVER_SERVICE_ACCOUNT } from '../kube/csr-approver.js';
import { CsrSigner } from '../kube/csr-signer.js';
import { edgeNodeTest } from '../kube/edge-nodes.js';
import { Informer } from '../kube/informer.js';
import { InformerNodeResolver, nodeInformer, podPlacementInformer, type PodPlacement } from '../kube/node-resolver.js';
import { ServerConfigSource } from '../kube/server-config-source.js';
import { servingNames, TUNNEL_NAMESPACE, TUNNEL_SERVICE_SELECTOR } from '../kube/tunnel-addresses.js';

export const SERVING_CERT_PREFIX = 'yurttunnel-server';
export const PROXY_CLIENT_CERT_PREFIX = 'yurttunnel-server-proxy-client';

export interface ClusterOptions {
  source: KubeConfigSource;
  certDir: string;
  certIPs: string[];
  certDNSNames: string[];
  /** --insecure-port (the right side `dnat-ports-pair` honours). */
  insecurePort: number;
  /** --localhost-proxy-ports: used while the server ConfigMap does not set them. */
  localhostProxyPorts: readonly number[];
  /** --http-proxy-allowed-ports: used while the server ConfigMap does not set them. */
  httpProxyAllowedPorts?: readonly number[];
  logger: Logger;
  /** For tests: how often a pending CSR is read. */
  csrPollMs?: number;
  /** Run the CSR approver (leader-elected); off when undefined. The server's ServiceAccount defaults to yurt-tunnel-server. */
  csrApprover?: { serverServiceAccount?: string | undefined };
}

/** The cluster's CA bundle, from the kubeconfig (inline or a file) or the service account. */
async function clusterCA(client: KubeClient): Promise<string> {
  const cluster = client.config.getCurrentCluster();
  if (cluster?.caData !== undefined && cluster.caData !== '') return Buffer.from(cluster.caData, 'base64').toString('utf8');
  if (cluster?.caFile !== undefined && cluster.caFile !== '') {
    return readPemFile(cluster.caFile, { namedBy: `the cluster CA named by ${describeSource(client.source)}` });
  }
  throw new ConfigError(
    'YT_ERR_KUBECONFIG',
    `${describeSource(client.source)} has no certificate-authority for the cluster; agents and callers cannot be verified`,
  );
}

/** The serving certificate: its names follow the tunnel Services and the nodes (servingNames); gaps are logged once each time they change. */
function servingCertificate(opts: ClusterOptions, signer: CsrSigner, services: Informer<V1Service>, nodes: Informer<V1Node>): CertificateManager {
  let reportedProblems = '';
  const servingTemplate = (): CertificateTemplate => {
    const names = servingNames(services.list(), nodes.list(), { ips: opts.certIPs, dnsNames: opts.certDNSNames });
    const problems = names.problems.join('; ');
    if (problems !== reportedProblems) {
      reportedProblems = problems;
      if (problems !== '') opts.logger.warn('serving certificate addresses incomplete', { problems });
    }
    return {
      commonName: SERVER_COMMON_NAME,
      organizations: [SERVER_ORGANIZATION],
      dnsNames: names.dnsNames,
      ips: names.ips,
      signerName: KUBELET_SERVING_SIGNER,
      usages: SERVING_USAGES,
    };
  };
  return new CertificateManager({
    name: SERVING_CERT_PREFIX,
    store: new PemFileStore(opts.certDir, SERVING_CERT_PREFIX),
    source: signer,
    template: servingTemplate,
    logger: opts.logger,
  });
}

/** The client certificate the server shows the kubelets. */
function proxyClientCertificate(opts: ClusterOptions, signer: CsrSigner): CertificateManager {
  return new CertificateManager({
    name: PROXY_CLIENT_CERT_PREFIX,
    store: new PemFileStore(opts.certDir, PROXY_CLIENT_CERT_PREFIX),
    source: signer,
    template: () => ({
      commonName: PROXY_CLIENT_COMMON_NAME,
      organizations: [YURTTUNNEL_ORGANIZATION],
      dnsNames: [],
      ips: [],
      signerName: KUBE_APISERVER_CLIENT_SIGNER,
      usages: CLIENT_USAGES,
    }),
    logger: opts.logger,
  });
}

/** The approver lets through a serving CSR naming only what the serving certificate's template names (csr-review.ts). */
function csrApproverFor(
  approver: NonNullable<ClusterOptions['csrApprover']>,
  opts: ClusterOptions,
  client: KubeClient,
  services: Informer<V1Service>,
  nodes: Informer<V1Node>,
  kubeLog: Logger,
): CsrApprover {
  return new CsrApprover({
    client,
    serverServiceAccount: approver.serverServiceAccount ?? DEFAULT_SERVER_SERVICE_ACCOUNT,
    servingNames: async () => {
      await Promise.all([services.waitForSync(), nodes.waitForSync()]);
      return servingNames(services.list(), nodes.list(), { ips: opts.certIPs, dnsNames: opts.certDNSNames });
    },
    logger: kubeLog,
  });
}

export class ClusterServices {
  private stopping: Promise<void> | undefined;
  private constructor(
    readonly client: KubeClient,
    readonly clusterCA: string,
    readonly nodes: Informer<V1Node>,
    readonly pods: Informer<PodPlacement, V1Pod>,
    readonly services: Informer<V1Service>,
    /** The server ConfigMap kube-system/yurt-tunnel-server-cfg, live. */
    readonly config: ServerConfigSource,
    readonly resolver: NodeResolver,
    readonly serving: CertificateManager,
    readonly proxyClient: CertificateManager,
    /** Edge nodes by name or address, from the Node informer (the egress frontends' direct dials). */
    readonly isEdgeNode: EdgeNodeTest,
    readonly csrApprover: CsrApprover | undefined,
  ) {}

  /** Builds the client and starts informers and certificate managers; throws only for a configuration that cannot be read. */
  static async start(opts: ClusterOptions): Promise<ClusterServices> {
    const log = opts.logger;
    const client = createKubeClient(opts.source);
    const ca = await clusterCA(client);
    log.info('cluster mode', { apiServer: client.server, config: describeSource(opts.source) });
    const kubeLog = log.child({ apiServer: client.server });
    const nodes = nodeInformer(client, kubeLog);
    const pods = podPlacementInformer(client, kubeLog);
    const services = new Informer<V1Service>({
      name: `${TUNNEL_NAMESPACE}/services`,
      list: (o) => client.core.listNamespacedService({ namespace: TUNNEL_NAMESPACE, ...o }),
      watchPath: `/api/v1/namespaces/${TUNNEL_NAMESPACE}/services`,
      labelSelector: TUNNEL_SERVICE_SELECTOR,
      watch: client.watch,
      logger: kubeLog,
    });
    const config = new ServerConfigSource(client, {
      insecurePort: opts.insecurePort,
      localhostProxyPorts: opts.localhostProxyPorts,
      ...(opts.httpProxyAllowedPorts !== undefined ? { httpProxyAllowedPorts: opts.httpProxyAllowedPorts } : {}),
      logger: kubeLog,
    });
    const signer = new CsrSigner(client, { logger: kubeLog, ...(opts.csrPollMs !== undefined ? { pollMs: opts.csrPollMs } : {}) });
    const serving = servingCertificate(opts, signer, services, nodes);
    const proxyClient = proxyClientCertificate(opts, signer);
    const csrApprover = opts.csrApprover === undefined ? undefined : csrApproverFor(opts.csrApprover, opts, client, services, nodes, kubeLog);
    // The wanted serving names follow the tunnel Services (and, for NodePort, the cloud nodes).
    const recheck = (): void => {
      if (!services.synced() || !nodes.synced()) return;
      serving.check('tunnel Services or nodes changed');
      csrApprover?.recheck();
    };
    services.addHandler({ add: recheck, update: recheck, delete: recheck });
    nodes.addHandler({ update: (old, now) => (old !== now ? recheck() : undefined) });
    nodes.start();
    pods.start();
    services.start();
    config.start();
    // Before the certificates: the server's own CSRs are approved by it (or by the replica that leads).
    csrApprover?.start();
    await Promise.all([serving.start(), proxyClient.start()]);
    const resolver = new InformerNodeResolver(nodes, pods);
    return new ClusterServices(client, ca, nodes, pods, services, config, resolver, serving, proxyClient, edgeNodeTest(nodes), csrApprover);
  }

  /** Both certificates, as soon as both exist. */
  async certificates(): Promise<{ serving: CertKeyPair; proxyClient: CertKeyPair }> {
    const [serving, proxyClient] = await Promise.all([this.serving.ready(), this.proxyClient.ready()]);
    return { serving, proxyClient };
  }

  /** Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    await Promise.all([
      this.serving.stop(),
      this.proxyClient.stop(),
      this.nodes.stop(),
      this.pods.stop(),
      this.services.stop(),
      this.config.stop(),
      this.csrApprover?.stop(),
    ]);
  }
}
