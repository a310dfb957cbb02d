// The agent's client certificate from the cluster, bootstrapped with the
// kubelet's identity as OpenYurt's agent does: a CSR for
// `tunnel-agent-client` / `openyurt:yurttunnel` naming this node (DNS SAN =
// node name, IP SAN = node IP, so the server's identity check holds), signed
// by `kubernetes.io/kube-apiserver-client`, kept in --cert-dir and renewed
// before it expires. The server's certificate is checked against the cluster CA.

import { CertificateManager, CLIENT_USAGES, KUBE_APISERVER_CLIENT_SIGNER } from '../certs/certificate-manager.js';
import { AGENT_COMMON_NAME, YURTTUNNEL_ORGANIZATION } from '../certs/local-store.js';
import { PemFileStore } from '../certs/pem-file-store.js';
import { readPemFile } from '../certs/read-pem.js';
import { ConfigError } from '../protocol/errors.js';
import type { Logger } from '../log/logger.js';
import { createKubeClient, describeSource, type KubeConfigSource } from '../kube/client.js';
import { CsrSigner } from '../kube/csr-signer.js';

export const AGENT_CERT_PREFIX = 'yurttunnel-agent';

export interface ClusterCertificateOptions {
  source: KubeConfigSource;
  certDir: string;
  nodeName: string;
  nodeIPs: string[];
  /** A CA file given by flag; default the cluster's CA from the client configuration. */
  caFile?: string;
  csrPollMs?: number;
  logger: Logger;
}

export interface ClusterCertificate {
  ca: string;
  manager: CertificateManager;
}

export async function startClusterCertificate(opts: ClusterCertificateOptions): Promise<ClusterCertificate> {
  const client = createKubeClient(opts.source);
  const cluster = client.config.getCurrentCluster();
  let ca: string;
  const caFile = opts.caFile ?? (cluster?.caData ? undefined : cluster?.caFile);
  if (caFile !== undefined && caFile !== '') {
    ca = await readPemFile(caFile, {
      namedBy: opts.caFile !== undefined ? '--ca-file' : `the cluster CA named by ${describeSource(opts.source)}`,
      kind: 'certificate',
    });
  } else if (cluster?.caData) {
    ca = Buffer.from(cluster.caData, 'base64').toString('utf8');
  } else {
    throw new ConfigError('YT_ERR_KUBECONFIG', `${describeSource(opts.source)} has no certificate-authority; give the server's CA with --ca-file`);
  }
  opts.logger.info('client certificate from the cluster', { apiServer: client.server, config: describeSource(opts.source), certDir: opts.certDir });
  const manager = new CertificateManager({
    name: AGENT_CERT_PREFIX,
    store: new PemFileStore(opts.certDir, AGENT_CERT_PREFIX),
    source: new CsrSigner(client, { logger: opts.logger, ...(opts.csrPollMs !== undefined ? { pollMs: opts.csrPollMs } : {}) }),
    template: () => ({
      commonName: AGENT_COMMON_NAME,
      organizations: [YURTTUNNEL_ORGANIZATION],
      dnsNames: [opts.nodeName],
      ips: opts.nodeIPs,
      signerName: KUBE_APISERVER_CLIENT_SIGNER,
      usages: CLIENT_USAGES,
    }),
    logger: opts.logger,
  });
  await manager.start();
  return { ca, manager };
}
