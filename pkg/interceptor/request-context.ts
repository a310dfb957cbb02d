// What the master server knows about a request on its way to a kubelet, and
// what the middleware changes: where the agent dials, which agent (node), and
// whether TLS runs to the far end.

import { isIP } from 'node:net';

export const PROXY_HOST_HEADER = 'x-tunnel-proxy-host';
export const PROXY_DEST_HEADER = 'x-tunnel-proxy-dest';

export interface RequestContext {
  method: string;
  /** Path and query as received. */
  url: string;
  /** TLS runs to the far end: starts as "the caller came over TLS" (secure port); see middleware/master-port-tls.ts. */
  tls: boolean;
  /** host:port the agent will dial; starts as the request's Host. */
  dialAddress: string;
  /** The agent's node, sent as X-Tunnel-Proxy-Host; set by the middleware when known. */
  proxyHost: string | undefined;
  /** X-Tunnel-Proxy-Dest as sent by a direct caller. */
  proxyDest: string | undefined;
  /** X-Forwarded-Uri, which kube-apiserver's node proxy sets (/api/v1/nodes/{node}/proxy/...). */
  forwardedUri: string | undefined;
  /** The TLS server name (SNI) the caller asked for: a node name when it dialled one. */
  serverName: string | undefined;
  /** The Host to send instead of the caller's: the HTTP proxy's absolute-URI authority (RFC 9112 §3.2.2). */
  hostHeader?: string;
  /** Via as received (every line, comma-joined): a tunnel server's mark means a loop (loop-mark.ts). */
  via?: string;
}

/** Splits host:port (IPv6 in brackets); undefined when it is not that. */
export function splitAddress(address: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]/\s]+)):(\d{1,5})$/.exec(address);
  if (m === null) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  return { host: m[1] ?? m[2]!, port };
}

export function joinAddress(host: string, port: number): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The bounded path class used as a metric label (never the full path). */
export function pathClass(url: string): 'logs' | 'exec' | 'attach' | 'portforward' | 'metrics' | 'stats' | 'other' {
  const path = url.split('?')[0]!;
  if (path.startsWith('/containerLogs/') || path === '/logs' || path.startsWith('/logs/')) return 'logs';
  if (path.startsWith('/exec/')) return 'exec';
  if (path.startsWith('/attach/')) return 'attach';
  if (path.startsWith('/portForward/')) return 'portforward';
  if (path === '/metrics' || path.startsWith('/metrics/')) return 'metrics';
  if (path === '/stats' || path.startsWith('/stats/')) return 'stats';
  return 'other';
}
