// The control plane's certificates, made per run: one CA (also the signer of
// CSRs and of the kubelets' serving certificates), kube-apiserver's serving
// certificate, an administrator, kube-apiserver's kubelet client and the
// service-account key; and kubeconfigs for them. Used by the local cluster
// (hack/cluster) and by the tests' control plane (test/support/envtest).

import { generateKeyPairSync } from 'node:crypto';
import { createCA, issueCertificate, type CertKeyPair } from '../../pkg/certs/pki.js';

export interface ControlPlanePKI {
  ca: CertKeyPair;
  apiserver: CertKeyPair;
  admin: CertKeyPair;
  kubeletClient: CertKeyPair;
  serviceAccountKey: string;
}

/** `apiserverIPs`: kube-apiserver's addresses beyond 127.0.0.1 and the `kubernetes` Service's 10.96.0.1. */
export function controlPlanePKI(opts: { caName?: string; apiserverIPs?: string[] } = {}): ControlPlanePKI {
  const ca = createCA(opts.caName ?? 'envtest-ca');
  return {
    ca,
    apiserver: issueCertificate(ca, {
      commonName: 'kube-apiserver',
      ips: ['127.0.0.1', '10.96.0.1', ...(opts.apiserverIPs ?? [])],
      dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
      usages: ['serverAuth'],
    }),
    admin: issueCertificate(ca, { commonName: 'envtest-admin', organizations: ['system:masters'], usages: ['clientAuth'] }),
    kubeletClient: issueCertificate(ca, {
      commonName: 'kube-apiserver-kubelet-client',
      organizations: ['system:masters'],
      usages: ['clientAuth'],
    }),
    serviceAccountKey: generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs1', format: 'pem' }).toString(),
  };
}

/** A kubeconfig for `server` authenticating with `user`'s client certificate. */
export function kubeconfigYAML(server: string, ca: string, user: CertKeyPair, name = 'envtest'): string {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    `- name: ${name}`,
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${b64(ca)}`,
    'users:',
    `- name: ${name}-user`,
    '  user:',
    `    client-certificate-data: ${b64(user.cert)}`,
    `    client-key-data: ${b64(user.key)}`,
    'contexts:',
    `- name: ${name}`,
    '  context:',
    `    cluster: ${name}`,
    `    user: ${name}-user`,
    `current-context: ${name}`,
    '',
  ].join('\n');
}
