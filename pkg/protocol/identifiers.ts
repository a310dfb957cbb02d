// Agent identifiers: the `agentidentifiers` metadata, in URL-query syntax
// (`ipv4=10.0.0.5&host=node1&default-route=true`; a key may repeat).

export interface AgentIdentifiers {
  ipv4: string[];
  ipv6: string[];
  host: string[];
  cidr: string[];
  defaultRoute: boolean;
}

export const IDENTIFIER_KEYS = ['ipv4', 'ipv6', 'host', 'cidr', 'default-route'] as const;

export function emptyIdentifiers(): AgentIdentifiers {
  return { ipv4: [], ipv6: [], host: [], cidr: [], defaultRoute: false };
}

/**
 * Parses the metadata value. Unknown keys are passed to `onUnknownKey` and
 * otherwise ignored, as the upstream server does (fail open).
 */
export function parseAgentIdentifiers(text: string, onUnknownKey?: (key: string) => void): AgentIdentifiers {
  const ids = emptyIdentifiers();
  let sawDefaultRoute = false;
  for (const [key, value] of new URLSearchParams(text)) {
    switch (key) {
      case 'ipv4':
      case 'ipv6':
      case 'host':
      case 'cidr':
        if (value !== '') ids[key].push(value);
        break;
      case 'default-route':
        // Like Go's strconv.ParseBool on the first value only.
        if (!sawDefaultRoute) ids.defaultRoute = ['1', 't', 'T', 'TRUE', 'true', 'True'].includes(value);
        sawDefaultRoute = true;
        break;
      default:
        onUnknownKey?.(key);
    }
  }
  return ids;
}

export function formatAgentIdentifiers(ids: AgentIdentifiers): string {
  const q = new URLSearchParams();
  for (const v of ids.ipv4) q.append('ipv4', v);
  for (const v of ids.ipv6) q.append('ipv6', v);
  for (const v of ids.host) q.append('host', v);
  for (const v of ids.cidr) q.append('cidr', v);
  if (ids.defaultRoute) q.append('default-route', 'true');
  return q.toString();
}

/**
 * The host part of a dial address, as upstream's RemovePortFromHost: no or one
 * ':' → the text before it; more (IPv6) → strip a trailing ':port' only when
 * the address is bracketed, then the brackets.
 */
export function removePortFromHost(address: string): string {
  const colons = address.split(':').length - 1;
  if (colons <= 1) {
    const i = address.indexOf(':');
    return i < 0 ? address : address.slice(0, i);
  }
  let host = address;
  if (host.includes('[')) {
    const i = host.lastIndexOf(':');
    if (i > host.lastIndexOf(']')) host = host.slice(0, i);
  }
  return host.replace(/^\[/, '').replace(/\]$/, '');
}
