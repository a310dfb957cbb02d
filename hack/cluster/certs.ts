// The cluster's certificates and kubeconfigs, written where each process
// reads them: the control plane's under <state>/pki (the cloud node's mount
// namespace sees the state folder as the root does), and each node's in its
// private folders, laid out as on a kubeadm node: /etc/kubernetes/kubelet.conf
// (the CA inline) naming /var/lib/kubelet/pki/kubelet-client-current.pem (the kubelet's client
// certificate and key, CN system:node:<name>, O system:nodes; root-only),
// /etc/kubernetes/pki/ca.crt, a serving certificate with the node's address as
// SAN, and kube-proxy.conf.

import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { issueCertificate, type CertKeyPair } from '../../pkg/certs/pki.js';
import { privatePath } from './holder.js';
import { controlPlanePKI, kubeconfigYAML } from './pki.js';
import { ADMIN_KUBECONFIG, STATE_DIR } from './state.js';
import { APISERVER_PORT, CLOUD_ADDRESS, type NodeSpec } from './topology.js';

export const PKI_DIR = join(STATE_DIR, 'pki');
export const APISERVER_URL = `https://${CLOUD_ADDRESS}:${APISERVER_PORT}`;

const pkiFile = (name: string): string => join(PKI_DIR, name);

export const CONTROL_PLANE_FILES = {
  ca: pkiFile('ca.crt'),
  caKey: pkiFile('ca.key'),
  apiserver: pkiFile('apiserver.crt'),
  apiserverKey: pkiFile('apiserver.key'),
  kubeletClient: pkiFile('apiserver-kubelet-client.crt'),
  kubeletClientKey: pkiFile('apiserver-kubelet-client.key'),
  serviceAccountKey: pkiFile('sa.key'),
  controllerManagerKubeconfig: pkiFile('controller-manager.kubeconfig'),
  schedulerKubeconfig: pkiFile('scheduler.kubeconfig'),
};

function writePair(dir: string, name: string, pair: CertKeyPair): void {
  writeFileSync(join(dir, `${name}.crt`), pair.cert);
  writeFileSync(join(dir, `${name}.key`), pair.key, { mode: 0o600 });
}

function readCA(): CertKeyPair {
  return { cert: readFileSync(CONTROL_PLANE_FILES.ca, 'utf8'), key: readFileSync(CONTROL_PLANE_FILES.caKey, 'utf8') };
}

/** Makes the CA and the control plane's certificates and kubeconfigs, and the admin kubeconfig. */
export function writeControlPlanePKI(): void {
  mkdirSync(PKI_DIR, { recursive: true });
  const pki = controlPlanePKI({ caName: 'yurt-tunnel-cluster-ca', apiserverIPs: [CLOUD_ADDRESS] });
  writePair(PKI_DIR, 'ca', pki.ca);
  writePair(PKI_DIR, 'apiserver', pki.apiserver);
  writePair(PKI_DIR, 'apiserver-kubelet-client', pki.kubeletClient);
  writeFileSync(CONTROL_PLANE_FILES.serviceAccountKey, pki.serviceAccountKey, { mode: 0o600 });
  writeFileSync(ADMIN_KUBECONFIG, kubeconfigYAML(APISERVER_URL, pki.ca.cert, pki.admin, 'yurt-tunnel-cluster'), { mode: 0o600 });
  const user = (commonName: string): CertKeyPair => issueCertificate(pki.ca, { commonName, usages: ['clientAuth'] });
  // Inside the cloud namespace, over its loopback.
  const local = `https://127.0.0.1:${APISERVER_PORT}`;
  writeFileSync(CONTROL_PLANE_FILES.controllerManagerKubeconfig, kubeconfigYAML(local, pki.ca.cert, user('system:kube-controller-manager')), { mode: 0o600 });
  writeFileSync(CONTROL_PLANE_FILES.schedulerKubeconfig, kubeconfigYAML(local, pki.ca.cert, user('system:kube-scheduler')), { mode: 0o600 });
}

export const NODE_FILES = {
  kubeletKubeconfig: '/etc/kubernetes/kubelet.conf',
  kubeProxyKubeconfig: '/etc/kubernetes/kube-proxy.conf',
  ca: '/etc/kubernetes/pki/ca.crt',
  servingCert: '/etc/kubernetes/pki/kubelet.crt',
  servingKey: '/etc/kubernetes/pki/kubelet.key',
  /** Certificate and key in one file, as the kubelet keeps them after its bootstrap. */
  clientPEM: '/var/lib/kubelet/pki/kubelet-client-current.pem',
  kubeletConfig: '/etc/kubernetes/kubelet-config.yaml',
};

/** Writes `spec`'s kubelet and kube-proxy credentials into its private /etc/kubernetes. */
export function writeNodePKI(spec: NodeSpec): void {
  const etc = privatePath(spec.name, '/etc/kubernetes');
  const pki = join(etc, 'pki');
  mkdirSync(pki, { recursive: true });
  const ca = readCA();
  writeFileSync(join(pki, 'ca.crt'), ca.cert);
  writePair(pki, 'kubelet', issueCertificate(ca, { commonName: spec.name, dnsNames: [spec.name], ips: [spec.address], usages: ['serverAuth'] }));
  const client = issueCertificate(ca, { commonName: `system:node:${spec.name}`, organizations: ['system:nodes'], usages: ['clientAuth'] });
  const kubeletPKI = join(privatePath(spec.name, '/var/lib/kubelet'), 'pki');
  mkdirSync(kubeletPKI, { recursive: true, mode: 0o700 });
  writeFileSync(join(kubeletPKI, 'kubelet-client-current.pem'), client.cert + client.key, { mode: 0o600 });
  // As kubeadm writes it: the CA inline, the client certificate and key by path (the kubelet rotates that file).
  writeFileSync(join(etc, 'kubelet.conf'), kubeletKubeconfig(APISERVER_URL, ca.cert, NODE_FILES.clientPEM), { mode: 0o600 });
  const proxy = issueCertificate(ca, { commonName: 'system:kube-proxy', usages: ['clientAuth'] });
  writeFileSync(join(etc, 'kube-proxy.conf'), kubeconfigYAML(APISERVER_URL, ca.cert, proxy, 'yurt-tunnel-cluster'), { mode: 0o600 });
}

function kubeletKubeconfig(server: string, ca: string, pem: string): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: default-cluster',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${Buffer.from(ca).toString('base64')}`,
    'users:',
    '- name: default-auth',
    '  user:',
    `    client-certificate: ${pem}`,
    `    client-key: ${pem}`,
    'contexts:',
    '- name: default-context',
    '  context:',
    '    cluster: default-cluster',
    '    user: default-auth',
    'current-context: default-context',
    '',
  ].join('\n');
}
