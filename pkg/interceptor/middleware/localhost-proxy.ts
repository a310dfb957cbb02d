// Ports configured as localhost-proxy-ports are served on the edge node's
// loopback (127.0.0.1, or ::1 for IPv6 nodes): metrics endpoints that listen
// only there, like the agent's own or YurtHub's. The node is the one whose
// address the request was for.

import { isIP } from 'node:net';
import type { NodeResolver } from '../../nodes/node-resolver.js';
import { joinAddress, splitAddress } from '../request-context.js';
import type { Middleware } from './middleware.js';
import { HttpError } from '../errors.js';

/** `ports` is read on every request, so a reloaded configuration applies at once. */
export function localhostProxy(ports: () => ReadonlySet<number>, resolver: NodeResolver): Middleware {
  return (ctx) => {
    const dest = splitAddress(ctx.dialAddress);
    if (dest === undefined) throw new HttpError(400, `destination ${JSON.stringify(ctx.dialAddress)} is not host:port`);
    if (!ports().has(dest.port)) return;
    if (ctx.proxyHost === undefined) {
      const nodes = resolver.nodesByIP(dest.host);
      if (nodes.length !== 1) {
        throw new HttpError(
          400,
          nodes.length === 0
            ? `no node has address ${dest.host}, so its localhost port ${dest.port} cannot be reached; send X-Tunnel-Proxy-Host`
            : `nodes ${nodes.map((n) => n.name).join(', ')} all have address ${dest.host}; send X-Tunnel-Proxy-Host to choose one`,
        );
      }
      ctx.proxyHost = nodes[0]!.name;
    }
    ctx.dialAddress = joinAddress(isIP(dest.host) === 6 ? '::1' : '127.0.0.1', dest.port);
  };
}
