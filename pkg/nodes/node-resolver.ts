// How nodes and pods are found: the contract between those who know them and
// those who ask. The master ports (pkg/interceptor) ask; the answers come from
// the connected agents in local mode (pkg/server/agent-node-resolver.ts) and
// from Node and Pod informers in cluster mode (pkg/kube/node-resolver.ts),
// with the agents as a fallback. It lives below all three so that none of
// them imports another for it.

export interface NodeInfo {
  name: string;
  /** Addresses the agent can dial the node's kubelet on, preferred first. */
  addresses: string[];
  /** The kubelet's port (status.daemonEndpoints.kubeletEndpoint.Port), when known. */
  kubeletPort?: number;
}

/** The kubelet's usual port, for node-proxy requests when the node's own is not known. */
export const DEFAULT_KUBELET_PORT = 10250;

export interface NodeResolver {
  /** A node by name, or undefined if unknown. */
  node(name: string): NodeInfo | undefined;
  /** Every node that has `ip` among its addresses. */
  nodesByIP(ip: string): NodeInfo[];
  /** The node a pod runs on, or undefined if unknown (or no pods are known). */
  podNode(namespace: string, pod: string): NodeInfo | undefined;
  /** Where unknown names were looked for, for error messages: "no connected agent advertises it". */
  readonly unknownNodeHint?: string;
}

/** Asks each resolver in turn; the first that knows answers. */
export class NodeResolverChain implements NodeResolver {
  readonly unknownNodeHint: string;

  constructor(private readonly resolvers: NodeResolver[]) {
    this.unknownNodeHint = resolvers
      .map((r) => r.unknownNodeHint)
      .filter((hint) => hint !== undefined)
      .join(', and ');
  }

  node(name: string): NodeInfo | undefined {
    for (const r of this.resolvers) {
      const found = r.node(name);
      if (found !== undefined) return found;
    }
    return undefined;
  }

  nodesByIP(ip: string): NodeInfo[] {
    for (const r of this.resolvers) {
      const found = r.nodesByIP(ip);
      if (found.length > 0) return found;
    }
    return [];
  }

  podNode(namespace: string, pod: string): NodeInfo | undefined {
    for (const r of this.resolvers) {
      const found = r.podNode(namespace, pod);
      if (found !== undefined) return found;
    }
    return undefined;
  }
}

/**
 * Whether `host` (a node's name or one of its addresses) belongs to an edge
 * node, whose connections only the tunnel reaches. The egress frontends dial
 * what is neither served by an agent nor an edge node's directly
 * (pkg/frontend/direct-dial.ts); an answer that is not known yet must be true.
 */
export type EdgeNodeTest = (host: string) => boolean;
