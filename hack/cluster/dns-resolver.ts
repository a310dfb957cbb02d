// The DNS route's resolver on the local cluster, standing in for
// yurt-tunnel-dns (CoreDNS is not installable here): dnsmasq on the cloud
// node's loopback, serving the DNS controller's records as its hosts file
// (dns-records-main.ts keeps the file to the ConfigMap, as CoreDNS's `hosts`
// plugin reads it), and the cloud node's own /etc/resolv.conf (a bind mount in
// its mount namespace, nothing of the machine's) naming it, so that
// kube-apiserver resolves node names with it.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runInNode, startInNode, stopInNode } from './holder.js';
import { ADMIN_KUBECONFIG, nodeDir, type ClusterState, type NodeState } from './state.js';
import { CLOUD } from './topology.js';

const DIR = join(nodeDir(CLOUD.name), 'dns');
export const DNS_HOSTS_FILE = join(DIR, 'tunnel-nodes');
const RESOLV_CONF = join(DIR, 'resolv.conf');
const PID_FILE = join(DIR, 'dnsmasq.pid');
const SYNC_MAIN = join(dirname(fileURLToPath(import.meta.url)), 'dns-records-main.js');

export async function startResolver(state: ClusterState, cloud: NodeState): Promise<void> {
  mkdirSync(DIR, { recursive: true });
  writeFileSync(DNS_HOSTS_FILE, '\n');
  writeFileSync(RESOLV_CONF, 'nameserver 127.0.0.1\n');
  startInNode(state, cloud, 'dnsmasq', 'dnsmasq', [
    '--keep-in-foreground',
    '--conf-file=/dev/null',
    '--no-resolv',
    '--no-hosts',
    `--addn-hosts=${DNS_HOSTS_FILE}`,
    '--listen-address=127.0.0.1',
    '--bind-interfaces',
    '--user=root',
    `--pid-file=${PID_FILE}`,
    '--log-facility=-',
  ]);
  startInNode(state, cloud, 'dns-records', process.execPath, [SYNC_MAIN, ADMIN_KUBECONFIG, DNS_HOSTS_FILE, PID_FILE]);
  await runInNode(cloud, 'mount', ['--bind', RESOLV_CONF, '/etc/resolv.conf']);
}

export async function stopResolver(state: ClusterState, cloud: NodeState): Promise<void> {
  await runInNode(cloud, 'umount', ['/etc/resolv.conf']);
  await stopInNode(state, cloud, 'dns-records');
  await stopInNode(state, cloud, 'dnsmasq');
}
