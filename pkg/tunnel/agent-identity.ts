// An agent is who its certificate says. The `agentid` and `agentidentifiers`
// metadata are the agent's own claims; without this check any holder of any
// agent certificate could register as any node and receive its kubelet
// traffic. The certificate names its node as OpenYurt's agent certificates
// and `issue-agent-cert` write it: a DNS SAN (or CN system:node:<name>), and
// the node's addresses as IP SANs.

import { isIP } from 'node:net';
import type { AgentIdentifiers } from '../protocol/identifiers.js';

/**
 * - `strict`: the agent ID and every host/ipv4/ipv6 identifier must be named by the certificate;
 * - `agent-id`: only the agent ID (identifiers are trusted, as upstream);
 * - `none`: nothing is compared (upstream's trust-the-header behaviour, for Go agents whose certificates do not name them).
 */
export type AgentIdentityCheck = 'strict' | 'agent-id' | 'none';

export const AGENT_IDENTITY_CHECKS: readonly AgentIdentityCheck[] = ['strict', 'agent-id', 'none'];

/** What a client certificate names, as Node reports it. */
export interface CertificateNames {
  commonName: string;
  dnsNames: string[];
  /** Normalised (isIP form, IPv6 compressed, lower case). */
  ips: string[];
}

/** The names in Node's `subjectaltname` text ("DNS:a, IP Address:10.0.0.1"), with the subject's CN. */
export function certificateNames(commonName: string | undefined, subjectAltName: string | undefined): CertificateNames {
  const dnsNames: string[] = [];
  const ips: string[] = [];
  for (const part of (subjectAltName ?? '').split(', ')) {
    if (part.startsWith('DNS:')) dnsNames.push(part.slice(4).toLowerCase());
    else if (part.startsWith('IP Address:')) ips.push(normalizeIP(part.slice(11)));
  }
  return { commonName: commonName ?? '', dnsNames, ips };
}

function normalizeIP(ip: string): string {
  if (isIP(ip) !== 6) return ip;
  return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
}

/** Why the certificate does not allow these claims, or undefined if it does. */
export function checkAgentIdentity(
  mode: AgentIdentityCheck,
  names: CertificateNames,
  agentID: string,
  identifiers: AgentIdentifiers,
): string | undefined {
  if (mode === 'none') return undefined;
  const describe = `certificate CN=${names.commonName}${[...names.dnsNames.map((d) => `DNS:${d}`), ...names.ips.map((i) => `IP:${i}`)].map((n) => `, ${n}`).join('')}`;
  const namesNode = names.dnsNames.includes(agentID.toLowerCase()) || names.commonName === `system:node:${agentID}`;
  if (!namesNode) {
    return `agent ID "${agentID}" is not named by the agent's ${describe} (a DNS SAN ${agentID} or CN system:node:${agentID} is needed)`;
  }
  if (mode === 'agent-id') return undefined;
  for (const host of identifiers.host) {
    if (host.toLowerCase() !== agentID.toLowerCase() && !names.dnsNames.includes(host.toLowerCase())) {
      return `identifier host=${host} is not named by the agent's ${describe} (a DNS SAN ${host} is needed)`;
    }
  }
  for (const [key, values] of [['ipv4', identifiers.ipv4], ['ipv6', identifiers.ipv6]] as const) {
    for (const ip of values) {
      if (isIP(ip) === 0 || !names.ips.includes(normalizeIP(ip))) {
        return `identifier ${key}=${ip} is not named by the agent's ${describe} (an IP SAN ${ip} is needed; issue-agent-cert --node-ip writes it)`;
      }
    }
  }
  return undefined;
}
