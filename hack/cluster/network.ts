// The cluster's networks: a namespace per node and per NAT router, linked by
// veth pairs made inside the namespaces (the root namespace never holds an
// end), and MASQUERADE on each router's uplink (topology.ts draws it).

import { run } from '../image.js';
import { writeState, type ClusterState } from './state.js';
import { CLOUD, CLOUD_2, CLOUD_2_LINK, CLOUD_ADDRESS, ROUTERS } from './topology.js';

const ip = (netns: string, ...args: string[]): Promise<string> => run('ip', ['-n', netns, ...args]);

/** Runs `command` in the network namespace `netns` only (the mount namespace stays the caller's). */
export function inNetns(netns: string, command: string, args: string[]): Promise<string> {
  return run('nsenter', [`--net=/run/netns/${netns}`, '--', command, ...args]);
}

async function addNetns(state: ClusterState, netns: string): Promise<void> {
  await run('ip', ['netns', 'add', netns]);
  state.netns.push(netns);
  writeState(state);
  await ip(netns, 'link', 'set', 'lo', 'up');
  // Nodes forward for their pods (CNI bridge, kube-proxy), routers for their edge.
  await inNetns(netns, 'sysctl', ['-q', '-w', 'net.ipv4.ip_forward=1']);
}

async function veth(a: { netns: string; name: string; cidr: string }, b: { netns: string; name: string; cidr: string }): Promise<void> {
  await ip(a.netns, 'link', 'add', a.name, 'type', 'veth', 'peer', 'name', b.name, 'netns', b.netns);
  for (const end of [a, b]) {
    await ip(end.netns, 'addr', 'add', end.cidr, 'dev', end.name);
    await ip(end.netns, 'link', 'set', end.name, 'up');
  }
}

export async function makeNetworks(state: ClusterState): Promise<void> {
  await addNetns(state, CLOUD.netns);
  // The cloud's own address (kube-apiserver's and the cloud node's), on its loopback: no dummy links here.
  await ip(CLOUD.netns, 'addr', 'add', `${CLOUD_ADDRESS}/32`, 'dev', 'lo');

  for (const [i, r] of ROUTERS.entries()) {
    await addNetns(state, r.netns);
    await addNetns(state, r.edge.netns);
    await veth(
      { netns: CLOUD.netns, name: `to-router-${i + 1}`, cidr: `${r.uplink.cloud}/30` },
      { netns: r.netns, name: 'uplink', cidr: `${r.uplink.router}/30` },
    );
    await veth(
      { netns: r.netns, name: 'lan', cidr: `${r.lan.router}/${r.lan.prefix}` },
      { netns: r.edge.netns, name: 'eth0', cidr: `${r.lan.edge}/${r.lan.prefix}` },
    );
    await ip(r.netns, 'route', 'add', 'default', 'via', r.uplink.cloud);
    await ip(r.edge.netns, 'route', 'add', 'default', 'via', r.lan.router);
    await inNetns(r.netns, 'iptables', ['-t', 'nat', '-A', 'POSTROUTING', '-o', 'uplink', '-j', 'MASQUERADE']);
    // As a NAT router does: nothing new comes in from outside (rejected, so that a caller learns it at once).
    await inNetns(r.netns, 'iptables', [
      '-A',
      'FORWARD',
      '-i',
      'uplink',
      '-m',
      'conntrack',
      '--ctstate',
      'NEW',
      '-j',
      'REJECT',
      '--reject-with',
      'icmp-host-prohibited',
    ]);
  }
  // A default route, as every real host has: a connection must get past routing to reach the OUTPUT chain, where
  // kube-proxy's DNAT (a host-network pod dialling a ClusterIP) and the iptables route's DNAT (kube-apiserver
  // dialling an edge kubelet) rewrite it. Without one both failed with ENETUNREACH before any rule applied. What
  // is not rewritten goes to the first router, which rejects it: the cloud still never reaches an edge node.
  await ip(CLOUD.netns, 'route', 'add', 'default', 'via', ROUTERS[0]!.uplink.router);
}

/** The optional second cloud node's namespace, its address on its loopback, and a link to the cloud namespace that routes it and its pods. */
export async function makeSecondCloudNetwork(state: ClusterState): Promise<void> {
  await addNetns(state, CLOUD_2.netns);
  await ip(CLOUD_2.netns, 'addr', 'add', `${CLOUD_2.address}/32`, 'dev', 'lo');
  await veth(
    { netns: CLOUD.netns, name: 'to-cloud-2', cidr: `${CLOUD_2_LINK.cloud}/30` },
    { netns: CLOUD_2.netns, name: 'uplink', cidr: `${CLOUD_2_LINK.node}/30` },
  );
  await ip(CLOUD.netns, 'route', 'add', `${CLOUD_2.address}/32`, 'via', CLOUD_2_LINK.node);
  await ip(CLOUD.netns, 'route', 'add', CLOUD_2.podCIDR, 'via', CLOUD_2_LINK.node);
  await ip(CLOUD_2.netns, 'route', 'add', 'default', 'via', CLOUD_2_LINK.cloud);
}
