// Which hosts are edge nodes', from the Node informer: a Node labelled
// openyurt.io/is-edge-worker=true, by its name or one of its addresses (any
// type: kube-apiserver dials the --kubelet-preferred-address-types one). Until
// the first list is in, every host counts as an edge node's, so nothing is
// dialled directly that might be one. Host names compare without case, as DNS
// names do (node names are lower case).

import type { V1Node } from '@kubernetes/client-node';
import type { EdgeNodeTest } from '../nodes/node-resolver.js';
import type { ObjectStore } from './node-resolver.js';
import { EDGE_WORKER_LABEL } from './tunnel-addresses.js';

function isEdge(node: V1Node): boolean {
  return node.metadata?.labels?.[EDGE_WORKER_LABEL] === 'true';
}

export function edgeNodeTest(nodes: ObjectStore<V1Node> & { synced(): boolean }): EdgeNodeTest {
  return (dialHost) => {
    if (!nodes.synced()) return true;
    const host = dialHost.toLowerCase();
    const named = nodes.get(host);
    if (named !== undefined && isEdge(named)) return true;
    return nodes.list().some((node) => isEdge(node) && (node.status?.addresses ?? []).some((a) => a.address.toLowerCase() === host));
  };
}
