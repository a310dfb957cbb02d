// Binds an agent's claims to its client certificate. An agent says who it is
// in gRPC metadata (`agentid`, `agentidentifiers`); anyone holding any agent
// certificate could claim any node. Here the claims are checked against the
// names in the certificate the TLS handshake verified:
//   agentid            a DNS SAN equal to it (OpenYurt's and our issue-agent-cert
//                      write the node name so), or the CN system:node:<agentid>
//   host=<name>        a DNS SAN equal to it (DNS names compare case-insensitively)
//   ipv4=/ipv6=<ip>    an IP SAN equal to it (addresses compare normalised)
// An agent ID is a Kubernetes node name, a lower-case DNS name, and the
// tunnel routes by it as sent. So the certificate's names are folded to lower
// case once, and the agent ID must equal one of them exactly: `EDGE-1` over
// edge-1's certificate is refused, never a second agent beside `edge-1` (Go
// agents send the node name as Kubernetes spells it). With the check `none`
// there is nothing to compare: agent IDs are taken as sent, as upstream does,
// and `EDGE-1` and `edge-1` are two agents, as any ID is whatever the caller
// says in that mode (the stream limit still counts each certificate once).
// Pure: no I/O, the caller logs and answers.

import { isIP } from 'node:net';
import type { AgentIdentifiers } from '../protocol/identifiers.js';

/** strict: agentid and every host/ipv4/ipv6 identifier; agent-id: agentid only; none: trust the metadata (upstream). */
export type AgentIdentityCheck = 'strict' | 'agent-id' | 'none';

export const AGENT_IDENTITY_CHECKS: readonly AgentIdentityCheck[] = ['strict', 'agent-id', 'none'];

/** What this module reads of Node's `TLSSocket.getPeerCertificate()`. */
export interface PeerCertificateNames {
  subject?: { CN?: string | string[] } | undefined;
  subjectaltname?: string | undefined;
}

export type IdentityVerdict = { ok: true } | { ok: false; check: 'agent-id' | 'host' | 'ipv4' | 'ipv6'; claimed: string; reason: string };

interface CertificateNames {
  commonNames: string[];
  /** DNS SANs, lower case. */
  dnsNames: string[];
  /** The <name> of each CN system:node:<name>, lower case. */
  nodeNames: string[];
  ips: string[];
}

const NODE_CN_PREFIX = 'system:node:';

/** Node quotes a SAN value that holds a comma or quote as a JSON string. */
function unquote(value: string): string {
  if (!value.startsWith('"')) return value;
  try {
    const parsed: unknown = JSON.parse(value);
    return typeof parsed === 'string' ? parsed : value;
  } catch {
    return value;
  }
}

/** One spelling per address: IPv6 compressed and lower case, IPv4 as is; undefined for a non-address. */
export function normalizeAddress(ip: string): string | undefined {
  const family = isIP(ip);
  if (family === 4) return ip;
  if (family === 6) return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
  return undefined;
}

function namesOf(cert: PeerCertificateNames | undefined): CertificateNames {
  const cn = cert?.subject?.CN;
  const commonNames = cn === undefined ? [] : Array.isArray(cn) ? cn : [cn];
  const nodeNames = commonNames.filter((n) => n.startsWith(NODE_CN_PREFIX)).map((n) => n.slice(NODE_CN_PREFIX.length).toLowerCase());
  const names: CertificateNames = { commonNames, dnsNames: [], nodeNames, ips: [] };
  // Split on ", " followed by a SAN type, so a quoted value holding ", " stays whole.
  for (const part of (cert?.subjectaltname ?? '').split(/, (?=[A-Za-z ]+:)/)) {
    if (part.startsWith('DNS:')) names.dnsNames.push(unquote(part.slice(4)).toLowerCase());
    else if (part.startsWith('IP Address:')) {
      const ip = normalizeAddress(unquote(part.slice(11)));
      if (ip !== undefined) names.ips.push(ip);
    }
  }
  return names;
}

function describe(names: CertificateNames): string {
  const parts = [...names.commonNames.map((cn) => `CN=${cn}`), ...names.dnsNames.map((d) => `DNS:${d}`), ...names.ips.map((ip) => `IP:${ip}`)];
  return parts.length === 0 ? 'no names' : parts.join(', ');
}

/** Checks the agent's claimed ID and identifiers against its verified client certificate. */
export function checkAgentIdentity(
  cert: PeerCertificateNames | undefined,
  agentID: string,
  identifiers: AgentIdentifiers,
  mode: AgentIdentityCheck,
): IdentityVerdict {
  if (mode === 'none') return { ok: true };
  const names = namesOf(cert);
  const refuse = (check: 'agent-id' | 'host' | 'ipv4' | 'ipv6', claimed: string, wants: string): IdentityVerdict => ({
    ok: false,
    check,
    claimed,
    reason:
      `agent ${JSON.stringify(agentID)} claims ${check === 'agent-id' ? 'agentid' : check}=${claimed} but its certificate ` +
      `(${describe(names)}) has no ${wants}; issue it a certificate naming it (yurt-tunnel-server issue-agent-cert ` +
      `--node-name/--node-ip) or start the server with --agent-identity-check=${check === 'agent-id' ? 'none' : 'agent-id'}`,
  });

  const named = (id: string): boolean => names.dnsNames.includes(id) || names.nodeNames.includes(id);
  if (!named(agentID)) {
    const lower = agentID.toLowerCase();
    if (lower !== agentID && named(lower)) {
      return {
        ok: false,
        check: 'agent-id',
        claimed: agentID,
        reason:
          `agent ${JSON.stringify(agentID)} claims agentid=${agentID} but its certificate (${describe(names)}) names ${lower}: ` +
          `an agent ID is a node name, lower case, and compares exactly; send agentid ${lower} (the node name as Kubernetes spells it)`,
      };
    }
    return refuse('agent-id', agentID, `DNS SAN ${agentID} nor CN ${NODE_CN_PREFIX}${agentID}`);
  }
  if (mode === 'agent-id') return { ok: true };

  for (const host of identifiers.host) {
    if (!names.dnsNames.includes(host.toLowerCase())) return refuse('host', host, `DNS SAN ${host}`);
  }
  for (const family of ['ipv4', 'ipv6'] as const) {
    for (const ip of identifiers[family]) {
      const normal = normalizeAddress(ip);
      const rightFamily = normal !== undefined && isIP(normal) === (family === 'ipv4' ? 4 : 6);
      if (!rightFamily || !names.ips.includes(normal)) return refuse(family, ip, `IP SAN ${ip}`);
    }
  }
  return { ok: true };
}
