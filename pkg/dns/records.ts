// The DNS records of the tunnel's hosts file (spec/yurttunnel.md §4.1): one
// `<ip>\t<node name>` line per node, sorted. An edge node resolves to the
// ClusterIP of x-tunnel-server-internal-svc, so that whoever calls
// `<node>:10250` lands on the tunnel's master port; any other node to its
// own InternalIP, else its ExternalIP. Every record is built from the whole
// node list, so a node's record is its own by name: there is no suffix match
// that would let node `n1` overwrite `edge-n1`, as OpenYurt's does.

import { EDGE_WORKER_LABEL } from '../kube/tunnel-addresses.js';
import type { V1Node } from '../kube/types.js';

export const TUNNEL_NODES_CONFIGMAP = 'yurt-tunnel-nodes';
export const TUNNEL_NODES_KEY = 'tunnel-nodes';

export type NodeRecord = { name: string; ip: string } | { name: string; skipped: string };

export function isEdgeNode(node: V1Node): boolean {
  return node.metadata?.labels?.[EDGE_WORKER_LABEL] === 'true';
}

/** Where `node`'s name should resolve, or why it gets no record. */
export function nodeRecord(node: V1Node, tunnelIP: string | undefined): NodeRecord {
  const name = node.metadata?.name ?? '';
  if (isEdgeNode(node)) {
    return tunnelIP !== undefined
      ? { name, ip: tunnelIP }
      : { name, skipped: 'it is an edge node and Service kube-system/x-tunnel-server-internal-svc has no ClusterIP (missing?)' };
  }
  const addresses = node.status?.addresses ?? [];
  const first = (type: string): string | undefined => addresses.find((a) => a.type === type && a.address !== '')?.address;
  const ip = first('InternalIP') ?? first('ExternalIP');
  return ip !== undefined ? { name, ip } : { name, skipped: 'it has neither an InternalIP nor an ExternalIP address' };
}

/** A record as one comparable string: what a node's event must change for the hosts file to change. */
export function recordKey(r: NodeRecord): string {
  return 'ip' in r ? `${r.ip}\t${r.name}` : `-\t${r.name}\t${r.skipped}`;
}

/** The hosts file: sorted `ip\tname` lines joined by newlines (OpenYurt's format, no trailing newline). */
export function hostsText(records: readonly NodeRecord[]): string {
  return records
    .flatMap((r) => ('ip' in r ? [`${r.ip}\t${r.name}`] : []))
    .sort()
    .join('\n');
}
