// How the master server finds nodes and pods. The Kubernetes integration
// answers from informers; without a cluster, the connected agents are the only
// source: an agent's `host` identifiers name its node and its `ipv4`/`ipv6`
// identifiers are the node's addresses.

import type { BackendRegistry } from '../tunnel/backend-registry.js';

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
}

/** Local mode: nodes are what the connected agents advertise; pods are unknown. */
export class AgentNodeResolver implements NodeResolver {
  constructor(private readonly registry: BackendRegistry) {}

  node(name: string): NodeInfo | undefined {
    for (const b of this.registry.all()) {
      if (b.identifiers.host.includes(name) || b.agentID === name) return this.info(name, b.identifiers.ipv4, b.identifiers.ipv6);
    }
    return undefined;
  }

  nodesByIP(ip: string): NodeInfo[] {
    const found = new Map<string, NodeInfo>();
    for (const b of this.registry.all()) {
      if (!b.identifiers.ipv4.includes(ip) && !b.identifiers.ipv6.includes(ip)) continue;
      const name = b.identifiers.host[0] ?? b.agentID;
      if (!found.has(name)) found.set(name, this.info(name, b.identifiers.ipv4, b.identifiers.ipv6));
    }
    return [...found.values()];
  }

  podNode(): NodeInfo | undefined {
    return undefined;
  }

  private info(name: string, ipv4: string[], ipv6: string[]): NodeInfo {
    return { name, addresses: [...ipv4, ...ipv6] };
  }
}
