// What a real local cluster needs on this machine, and the one reason it
// cannot run here (in the forms hack/run-tests.mjs accepts for a skip).

import { spawnSync } from 'node:child_process';
import { imageSkipReason } from '../image.js';
import { findClusterBinaries } from './binaries.js';
import { netnsSkipReason } from './netns-check.js';

/** Debian's packages the cluster's commands come from, by command. */
const TOOLS: [command: string, pkg: string][] = [
  ['containerd', 'containerd'],
  ['runc', 'runc'],
  ['umoci', 'umoci'],
  ['nsenter', 'util-linux'],
  ['iptables', 'iptables'],
  ['conntrack', 'conntrack'],
  // The DNS route's resolver (dns-resolver.ts).
  ['dnsmasq', 'dnsmasq'],
];

export function clusterSkipReason(): string | undefined {
  const netns = netnsSkipReason();
  if (netns !== undefined) return netns;
  const bins = findClusterBinaries();
  if ('missing' in bins) return bins.missing;
  if (spawnSync('/usr/lib/cni/bridge', ['--version'], { stdio: 'ignore' }).error !== undefined) {
    return 'containernetworking-plugins is not installed (apt-get install containernetworking-plugins)';
  }
  if (spawnSync('/bin/busybox', ['--help'], { stdio: 'ignore' }).error !== undefined) return 'busybox-static is not installed (apt-get install busybox-static)';
  for (const [command, pkg] of TOOLS) {
    if (spawnSync(command, ['--version'], { stdio: 'ignore' }).error !== undefined) return `${command} is not installed (apt-get install ${pkg})`;
  }
  return imageSkipReason();
}
