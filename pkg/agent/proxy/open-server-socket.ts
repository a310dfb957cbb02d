// The one place the agent opens a TCP connection to a tunnel server: directly
// or through the proxy that proxy-config.ts chose for that server. Transports
// (HTTP/2 today, WebSocket beside it) run their TLS over the socket this
// returns, so the TLS session and its certificate checks stay end to end.

import type { Socket } from 'node:net';
import { connectThroughHttpProxy } from './http-connect.js';
import { proxyFor, type ProxyConfig } from './proxy-config.js';
import { connectThroughSocks5 } from './socks5.js';
import { connectTCP, type SocketTarget } from './tcp.js';

export type { SocketTarget } from './tcp.js';

/**
 * A connected socket to `target`, tunnelled through the configured proxy
 * unless NO_PROXY exempts it. Rejects with a ProxyError naming the proxy and
 * its answer, the socket's own error for a direct dial, or `signal.reason`
 * when aborted; nothing is left open then.
 */
export function openServerSocket(target: SocketTarget, config: ProxyConfig | undefined, signal: AbortSignal): Promise<Socket> {
  const proxy = proxyFor(config, target.host, target.port);
  if (proxy === undefined) return connectTCP(target, signal);
  if (proxy.protocol === 'http' || proxy.protocol === 'https') return connectThroughHttpProxy(proxy, target, signal);
  return connectThroughSocks5(proxy, target, signal);
}
