// The control plane's certificates, made per run: one CA (also the signer of
// CSRs and of the stand-in kubelet's serving certificate), kube-apiserver's
// serving certificate, an administrator, kube-apiserver's kubelet client and
// the service-account key.

import { generateKeyPairSync } from 'node:crypto';
import { createCA, issueCertificate, type CertKeyPair } from '../../../pkg/certs/pki.js';

export interface ControlPlanePKI {
  ca: CertKeyPair;
  apiserver: CertKeyPair;
  admin: CertKeyPair;
  kubeletClient: CertKeyPair;
  serviceAccountKey: string;
}

export function controlPlanePKI(): ControlPlanePKI {
  const ca = createCA('envtest-ca');
  return {
    ca,
    apiserver: issueCertificate(ca, {
      commonName: 'kube-apiserver',
      ips: ['127.0.0.1', '10.96.0.1'],
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
