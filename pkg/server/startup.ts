// What the server reads before it builds anything: the files its flags name
// (all checked first, so a wrong one stops it before it listens), and its own
// certificates, from the local CA or from the cluster.

import { ensureLocalServerCertificates } from '../certs/local-store.js';
import type { CertKeyPair } from '../certs/pki.js';
import { readCertKeyPair, readPemFile } from '../certs/read-pem.js';
import type { ClusterServices } from './cluster.js';
import type { ServerOptions } from './options.js';

/** The files a server reads besides its own certificates, read and parsed before anything is built. */
export interface ServerFiles {
  clientCA: string | undefined;
  proxyClient: { cert: string; key: string } | undefined;
  kubeletCA: string | undefined;
}

async function readOptional(flag: string, path: string | undefined, kind: 'certificate' | 'key'): Promise<string | undefined> {
  if (path === undefined || path === '') return undefined;
  return readPemFile(path, { namedBy: flag, kind });
}

/** Reads and checks every file named by a flag; throws naming the flag and the file. */
export async function readServerFiles(opts: ServerOptions): Promise<ServerFiles> {
  if (opts.egressSelector !== undefined && opts.egressSelector.uds === opts.interceptorProxierUDS) {
    throw new TypeError(`--egress-selector-uds and --interceptor-proxier-uds are both ${opts.interceptorProxierUDS}; give each its own socket`);
  }
  if (((opts.proxyClientCertFile ?? '') === '') !== ((opts.proxyClientKeyFile ?? '') === '')) {
    throw new TypeError('--proxy-client-cert-file and --proxy-client-key-file go together');
  }
  const proxyCertFile = opts.proxyClientCertFile ?? '';
  const [clientCA, proxyClient, kubeletCA] = await Promise.all([
    readOptional('--client-ca-file', opts.clientCAFile, 'certificate'),
    proxyCertFile === ''
      ? undefined
      : readCertKeyPair({
          cert: { path: proxyCertFile, namedBy: '--proxy-client-cert-file' },
          key: { path: opts.proxyClientKeyFile!, namedBy: '--proxy-client-key-file' },
        }),
    readOptional('--kubelet-ca-file', opts.kubeletCAFile, 'certificate'),
  ]);
  return { clientCA, proxyClient, kubeletCA };
}

/** The certificates the listeners and the kubelet connector use, whichever mode made them. */
export interface ServerCertificates {
  /** CA bundle of agents' client certificates (and, by default, of callers on the secure port). */
  ca: string;
  server: CertKeyPair;
  proxyClient: CertKeyPair;
}

export async function localCertificates(opts: ServerOptions): Promise<ServerCertificates> {
  const log = opts.logger;
  log.info('no cluster configured: running in local certificate mode', { certDir: opts.certDir });
  const certs = await ensureLocalServerCertificates({
    certDir: opts.certDir,
    certIPs: opts.certIPs,
    certDNSNames: opts.certDNSNames,
  });
  if (certs.caReplacedBecause !== undefined) {
    log.warn(
      'replaced the local CA: the one in --cert-dir was unreadable to Go clients (Go agents, kube-apiserver, kubectl); ' +
        'every agent certificate it issued must be issued again with `yurt-tunnel-server issue-agent-cert`',
      { certDir: opts.certDir, reason: certs.caReplacedBecause },
    );
  }
  if (certs.changed.length > 0) log.info('certificates created', { certDir: opts.certDir, files: certs.changed.join(',') });
  if (opts.enableDNSController) log.info('DNS controller skipped: local mode has no cluster');
  if (opts.enableIptables) log.info('iptables manager skipped: local mode has no cluster');
  return { ca: certs.ca, server: certs.server, proxyClient: certs.proxyClient };
}

export async function clusterCertificates(cluster: ClusterServices, opts: ServerOptions): Promise<ServerCertificates> {
  const log = opts.logger;
  if (cluster.serving.current() === undefined || cluster.proxyClient.current() === undefined) {
    log.info('waiting for the serving and proxy-client certificates (CertificateSigningRequests) before listening', {
      certDir: opts.certDir,
    });
  }
  const { serving, proxyClient } = await cluster.certificates();
  return { ca: cluster.clusterCA, server: serving, proxyClient };
}
