// What the nat rules must say, from the cluster: which destination ports go
// to which master port (10250 → secure, 10255 → insecure, the ConfigMap's
// proxy ports), and which addresses are reached directly (the cloud nodes',
// and loopback), per IP family. Pure; rules.ts turns it into chains.

import { isIP, SocketAddress } from 'node:net';
import type { V1Node } from '../kube/types.js';
import { masterPortMappings, type MasterPort, type ServerConfig } from '../kube/server-config.js';
import { EDGE_WORKER_LABEL } from '../kube/tunnel-addresses.js';

/** A node with this label set to "true" has an agent, as OpenYurt's iptables manager counts it. */
export const REVERSE_TUNNEL_CLIENT_LABEL = 'openyurt.io/edge-enable-reverseTunnel-client';

export type Family = 4 | 6;
export const FAMILIES: readonly Family[] = [4, 6];

export interface MasterAddresses {
  secure: { host: string; port: number };
  insecure: { host: string; port: number };
}

export interface FamilyTargets {
  family: Family;
  /** Destinations reached directly, as CIDRs (`10.0.0.5/32`, `127.0.0.0/8`), sorted. */
  direct: string[];
  /** Destination port → DNAT target (`127.0.0.1:10263`, `[::1]:10263`), by port. */
  dnat: Map<number, string>;
}

export interface Targets {
  /** Cloud nodes with at least one address (the gauge yurttunnel_server_cloud_nodes_counter). */
  cloudNodes: number;
  /** Some node has an address of the family (IPv6 rules are written only then). */
  nodesHaveIPv6: boolean;
  families: Record<Family, FamilyTargets>;
  /** Ports that have no master address of a family (a master port bound to the other family), for a warning. */
  unreachable: { family: Family; port: number; masterPort: MasterPort }[];
}

const LOOPBACK: Record<Family, string> = { 4: '127.0.0.0/8', 6: '::1/128' };

export function isEdgeNode(node: V1Node): boolean {
  const labels = node.metadata?.labels ?? {};
  return labels[EDGE_WORKER_LABEL] === 'true' || labels[REVERSE_TUNNEL_CLIENT_LABEL] === 'true';
}

/** An address as iptables-save prints it (IPv6 compressed, lower case); undefined if it is not an IP. */
export function canonicalIP(ip: string): { address: string; family: Family } | undefined {
  const family = isIP(ip);
  if (family === 0) return undefined;
  const address = new SocketAddress({ address: ip, family: family === 6 ? 'ipv6' : 'ipv4' }).address;
  return { address, family: family as Family };
}

function isLoopback(ip: { address: string; family: Family }): boolean {
  return ip.family === 4 ? ip.address.startsWith('127.') : ip.address === '::1';
}

function nodeAddresses(node: V1Node): string[] {
  return (node.status?.addresses ?? []).filter((a) => a.type === 'InternalIP' || a.type === 'ExternalIP').map((a) => a.address);
}

/**
 * Where a master port is reached for `family`: its bind address, or the
 * family's loopback when it listens on every address (`0.0.0.0` only for
 * IPv4, `::` for both); undefined when it does not listen on that family.
 */
export function masterAddress(host: string, family: Family): string | undefined {
  if (host === '0.0.0.0') return family === 4 ? '127.0.0.1' : undefined;
  if (host === '::') return family === 4 ? '127.0.0.1' : '::1';
  const ip = canonicalIP(host);
  return ip?.family === family ? ip.address : undefined;
}

export function computeTargets(nodes: readonly V1Node[], config: ServerConfig, master: MasterAddresses): Targets {
  const direct: Record<Family, Set<string>> = { 4: new Set([LOOPBACK[4]]), 6: new Set([LOOPBACK[6]]) };
  let cloudNodes = 0;
  let nodesHaveIPv6 = false;
  for (const node of nodes) {
    const ips = nodeAddresses(node)
      .map(canonicalIP)
      .filter((ip) => ip !== undefined);
    if (ips.some((ip) => ip.family === 6)) nodesHaveIPv6 = true;
    if (isEdgeNode(node) || ips.length === 0) continue;
    cloudNodes++;
    for (const ip of ips) {
      if (!isLoopback(ip)) direct[ip.family].add(`${ip.address}/${ip.family === 4 ? 32 : 128}`);
    }
  }
  const unreachable: Targets['unreachable'] = [];
  const families = {} as Record<Family, FamilyTargets>;
  for (const family of FAMILIES) {
    const dnat = new Map<number, string>();
    for (const [port, to] of masterPortMappings(config)) {
      const address = masterAddress(master[to].host, family);
      if (address === undefined) {
        unreachable.push({ family, port, masterPort: to });
        continue;
      }
      dnat.set(port, family === 6 ? `[${address}]:${master[to].port}` : `${address}:${master[to].port}`);
    }
    families[family] = { family, direct: [...direct[family]].sort(), dnat };
  }
  return { cloudNodes, nodesHaveIPv6, families, unreachable };
}
