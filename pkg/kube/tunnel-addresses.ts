// The names and addresses the server's serving certificate must carry, from
// the tunnel's Services in kube-system (OpenYurt's order, spec/yurttunnel.md
// §4.3): how agents reach `x-tunnel-server-svc` (LoadBalancer ingress, the
// `x-tunnel-server-external-addr` annotation of a ClusterIP Service, or the
// cloud nodes of a NodePort one), the Service's cluster names and ClusterIP,
// loopback, the internal Service's, then --cert-ips and --cert-dns-names.

import { isIP } from 'node:net';
import type { V1Node, V1Service } from '@kubernetes/client-node';

export const TUNNEL_NAMESPACE = 'kube-system';
export const TUNNEL_SERVICE = 'x-tunnel-server-svc';
export const TUNNEL_INTERNAL_SERVICE = 'x-tunnel-server-internal-svc';
export const EXTERNAL_ADDR_ANNOTATION = 'x-tunnel-server-external-addr';
/** The label the tunnel's Services carry (the informer selects by it). */
export const TUNNEL_SERVICE_SELECTOR = 'name=yurt-tunnel-server';
export const EDGE_WORKER_LABEL = 'openyurt.io/is-edge-worker';

export interface ServingNames {
  ips: string[];
  dnsNames: string[];
  /** What could not be used, for a log line (a LoadBalancer without ingress yet, an unknown Service type). */
  problems: string[];
}

function serviceDomains(name: string): string[] {
  return [name, `${name}.${TUNNEL_NAMESPACE}`, `${name}.${TUNNEL_NAMESPACE}.svc`, `${name}.${TUNNEL_NAMESPACE}.svc.cluster.local`];
}

/** The Service's ClusterIP, unless it is headless or has none yet. */
export function clusterIPOf(svc: V1Service): string | undefined {
  const ip = svc.spec?.clusterIP;
  return ip !== undefined && ip !== '' && ip !== 'None' && isIP(ip) !== 0 ? ip : undefined;
}

/** "host:port" or a bare host, split; [::1]:443 too. */
function hostOf(addr: string): string {
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(addr);
  if (bracketed !== null) return bracketed[1]!;
  if (isIP(addr) === 6) return addr;
  const colon = addr.lastIndexOf(':');
  return colon >= 0 ? addr.slice(0, colon) : addr;
}

export function servingNames(
  services: readonly V1Service[],
  nodes: readonly V1Node[],
  extra: { ips: readonly string[]; dnsNames: readonly string[] },
): ServingNames {
  const ips: string[] = [];
  const dnsNames: string[] = [];
  const problems: string[] = [];
  const add = (value: string | undefined): void => {
    if (value === undefined || value === '') return;
    if (isIP(value) !== 0) ips.push(value);
    else dnsNames.push(value);
  };
  const byName = (name: string): V1Service | undefined =>
    services.find((s) => s.metadata?.name === name && (s.metadata.namespace ?? TUNNEL_NAMESPACE) === TUNNEL_NAMESPACE);

  const svc = byName(TUNNEL_SERVICE);
  if (svc !== undefined) {
    switch (svc.spec?.type ?? 'ClusterIP') {
      case 'LoadBalancer': {
        const ingress = svc.status?.loadBalancer?.ingress ?? [];
        if (ingress.length === 0) problems.push(`Service ${TUNNEL_SERVICE} is a LoadBalancer without an ingress address yet`);
        for (const i of ingress) {
          add(i.ip);
          add(i.hostname);
        }
        break;
      }
      case 'ClusterIP': {
        const external = svc.metadata?.annotations?.[EXTERNAL_ADDR_ANNOTATION];
        if (external !== undefined && external !== '') add(hostOf(external));
        break;
      }
      case 'NodePort':
        for (const node of nodes) {
          if (node.metadata?.labels?.[EDGE_WORKER_LABEL] !== 'false') continue;
          for (const a of node.status?.addresses ?? []) if (a.type === 'InternalIP' || a.type === 'Hostname') add(a.address);
        }
        break;
      default:
        problems.push(`Service ${TUNNEL_SERVICE} has type ${svc.spec?.type}, which agents cannot reach the server by`);
    }
    dnsNames.push(...serviceDomains(TUNNEL_SERVICE));
    add(clusterIPOf(svc));
  }
  ips.push('127.0.0.1', '::1');
  const internal = byName(TUNNEL_INTERNAL_SERVICE);
  if (internal !== undefined) {
    add(clusterIPOf(internal));
    dnsNames.push(...serviceDomains(TUNNEL_INTERNAL_SERVICE));
  }
  ips.push(...extra.ips);
  dnsNames.push(...extra.dnsNames);
  return { ips: [...new Set(ips)], dnsNames: [...new Set(dnsNames)], problems };
}
