// What `npm run cluster -- up` makes, by name and address. Every name starts
// with `ytc-` (yurt-tunnel cluster), apart from the `yt-<random>` namespaces
// the netns tests make, so that `down` removes only its own.
//
//   ytc-cloud (10.10.0.1: control plane + node "cloud")
//     ├─ 172.30.1.0/30 ─ ytc-router-1 (MASQUERADE) ─ 192.168.11.0/24 ─ ytc-edge-1 (.10: node "edge-1")
//     └─ 172.30.2.0/30 ─ ytc-router-2 (MASQUERADE) ─ 192.168.12.0/24 ─ ytc-edge-2 (.10: node "edge-2")
//
// Each router masquerades what its edge sends out and rejects every new
// connection from outside (icmp-host-prohibited): an edge node reaches the
// cloud, the cloud never reaches an edge node (the gap the tunnel fills). The
// cloud's default route leads to ytc-router-1, which rejects what is not its
// edge's answer.

export const PREFIX = 'ytc-';

export type Role = 'cloud' | 'edge';

export interface NodeSpec {
  /** The Node's name in Kubernetes. */
  name: string;
  role: Role;
  /** Its network namespace (a file in /run/netns). */
  netns: string;
  /** Its InternalIP. */
  address: string;
  /** Its pods' subnet (the CNI bridge's host-local range). */
  podCIDR: string;
}

export interface RouterSpec {
  netns: string;
  /** 172.30.<i>.0/30: the cloud's end is .1, the router's .2. */
  uplink: { cloud: string; router: string };
  /** The edge's subnet: the router is .1, the edge node .10. */
  lan: { router: string; edge: string; prefix: number };
  edge: NodeSpec;
}

export const CLOUD_ADDRESS = '10.10.0.1';
export const APISERVER_PORT = 6443;
export const SERVICE_CIDR = '10.96.0.0/12';
export const CLUSTER_CIDR = '10.244.0.0/16';
export const EDGE_LABEL = 'openyurt.io/is-edge-worker';

export const CLOUD: NodeSpec = { name: 'cloud', role: 'cloud', netns: `${PREFIX}cloud`, address: CLOUD_ADDRESS, podCIDR: '10.244.0.0/24' };

export const ROUTERS: RouterSpec[] = [1, 2].map((i) => ({
  netns: `${PREFIX}router-${i}`,
  uplink: { cloud: `172.30.${i}.1`, router: `172.30.${i}.2` },
  lan: { router: `192.168.${10 + i}.1`, edge: `192.168.${10 + i}.10`, prefix: 24 },
  edge: { name: `edge-${i}`, role: 'edge', netns: `${PREFIX}edge-${i}`, address: `192.168.${10 + i}.10`, podCIDR: `10.244.${i}.0/24` },
}));

export const NODES: NodeSpec[] = [CLOUD, ...ROUTERS.map((r) => r.edge)];

/**
 * An optional second cloud node (kubelet, containerd and kube-proxy only), linked to the cloud namespace
 * (172.30.9.0/30): where a second host-network server replica fits (second-cloud-node.ts). Not in NODES.
 */
export const CLOUD_2: NodeSpec = { name: 'cloud-2', role: 'cloud', netns: `${PREFIX}cloud-2`, address: '10.10.0.2', podCIDR: '10.244.3.0/24' };
export const CLOUD_2_LINK = { cloud: '172.30.9.1', node: '172.30.9.2' };

export const ALL_NETNS: string[] = [CLOUD.netns, ...ROUTERS.flatMap((r) => [r.netns, r.edge.netns]), CLOUD_2.netns];
