// The interceptor's node and pod lookups from Node and Pod informers: a pod's
// node is its spec.nodeName; a node's addresses are its InternalIPs, then its
// ExternalIPs; its kubelet port is status.daemonEndpoints.kubeletEndpoint.Port.
// Pods are kept trimmed to what routing needs, so a large cluster's pods cost
// a few hundred bytes each, not their whole spec.

import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { NodeInfo, NodeResolver } from '../nodes/node-resolver.js';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Informer } from './informer.js';

/** The lookups the resolver needs of an informer. */
export interface ObjectStore<T> {
  get(key: string): T | undefined;
  list(): T[];
}

/** What the resolver keeps of a pod. */
export interface PodPlacement {
  metadata: { name?: string; namespace?: string; resourceVersion?: string };
  spec: { nodeName?: string };
}

export function trimPod(pod: V1Pod): PodPlacement {
  const m = pod.metadata ?? {};
  return { metadata: { name: m.name, namespace: m.namespace, resourceVersion: m.resourceVersion }, spec: { nodeName: pod.spec?.nodeName } };
}

export function nodeInfo(node: V1Node): NodeInfo {
  const addresses = node.status?.addresses ?? [];
  const byType = (type: string): string[] => addresses.filter((a) => a.type === type && a.address !== '').map((a) => a.address);
  const port = node.status?.daemonEndpoints?.kubeletEndpoint?.Port;
  return {
    name: node.metadata?.name ?? '',
    addresses: [...byType('InternalIP'), ...byType('ExternalIP')],
    ...(port !== undefined && port > 0 ? { kubeletPort: port } : {}),
  };
}

export class InformerNodeResolver implements NodeResolver {
  readonly unknownNodeHint = 'no Node of that name in the cluster';

  constructor(
    private readonly nodes: ObjectStore<V1Node>,
    private readonly pods: ObjectStore<PodPlacement>,
  ) {}

  node(name: string): NodeInfo | undefined {
    const node = this.nodes.get(name);
    return node === undefined ? undefined : nodeInfo(node);
  }

  nodesByIP(ip: string): NodeInfo[] {
    return this.nodes
      .list()
      .map(nodeInfo)
      .filter((n) => n.addresses.includes(ip));
  }

  podNode(namespace: string, pod: string): NodeInfo | undefined {
    const nodeName = this.pods.get(`${namespace}/${pod}`)?.spec.nodeName;
    return nodeName === undefined || nodeName === '' ? undefined : this.node(nodeName);
  }
}

/** All Nodes. */
export function nodeInformer(client: KubeClient, logger: Logger): Informer<V1Node> {
  return new Informer<V1Node>({
    name: 'nodes',
    list: (opts) => client.core.listNode(opts),
    watchPath: '/api/v1/nodes',
    watch: client.watch,
    logger,
  });
}

/** Every scheduled Pod of the cluster, trimmed to its placement. */
export function podPlacementInformer(client: KubeClient, logger: Logger): Informer<PodPlacement, V1Pod> {
  return new Informer<PodPlacement, V1Pod>({
    name: 'pods',
    list: (opts) => client.core.listPodForAllNamespaces(opts),
    watchPath: '/api/v1/pods',
    watch: client.watch,
    fieldSelector: 'spec.nodeName!=',
    transform: trimPod,
    logger,
  });
}
