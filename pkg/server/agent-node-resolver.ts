// Nodes as the connected agents advertise them: an agent's `host` identifiers
// name its node and its `ipv4`/`ipv6` identifiers are the node's addresses.
// Pods are unknown. This is local mode's only source and cluster mode's fallback.

import type { NodeInfo, NodeResolver } from '../nodes/node-resolver.js';
import type { BackendRegistry } from '../tunnel/backend-registry.js';

export class AgentNodeResolver implements NodeResolver {
  readonly unknownNodeHint = 'no connected agent advertises it';

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
