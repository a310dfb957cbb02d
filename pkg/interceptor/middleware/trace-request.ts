// Finds the node a request is for (OpenYurt's TraceReq, without its bugs):
//  1. /exec|attach|portForward|containerLogs/{ns}/{pod}/... → the pod's node;
//  2. a Host that is a name → that node (unknown names get 400);
//  3. a Host that is an IP → as is, or X-Tunnel-Proxy-Dest (ip:port) for direct callers.
// It sets the dial address to the node's address and X-Tunnel-Proxy-Host to
// its name, unless the caller already chose one.

import { isIP } from 'node:net';
import type { Logger } from '../../log/logger.js';
import type { NodeInfo, NodeResolver } from '../node-resolver.js';
import { HttpError, joinAddress, splitAddress, type RequestContext } from '../request-context.js';
import type { Middleware } from './middleware.js';

const POD_PATH = /^\/(?:exec|attach|portForward|containerLogs)\/([^/?]+)\/([^/?]+)/;

function routeTo(ctx: RequestContext, node: NodeInfo, port: number): void {
  const address = node.addresses[0];
  if (address === undefined) {
    throw new HttpError(400, `node "${node.name}" has no known address: its agent advertises no ipv4 or ipv6 identifier`);
  }
  ctx.dialAddress = joinAddress(address, port);
  ctx.proxyHost ??= node.name;
}

export function traceRequest(resolver: NodeResolver, log: Logger): Middleware {
  return (ctx) => {
    const target = splitAddress(ctx.dialAddress);
    if (target === undefined) throw new HttpError(400, `Host ${JSON.stringify(ctx.dialAddress)} is not host:port`);

    const pod = POD_PATH.exec(ctx.url);
    if (pod !== null) {
      const [namespace, name] = [decodeURIComponent(pod[1]!), decodeURIComponent(pod[2]!)];
      const node = resolver.podNode(namespace, name);
      if (node !== undefined) {
        routeTo(ctx, node, target.port);
        return;
      }
      if (log.enabled(4)) log.verbose(4, 'pod not known; routing by Host', { namespace, pod: name, host: ctx.dialAddress });
    }

    if (isIP(target.host) === 0) {
      const node = resolver.node(target.host);
      if (node === undefined) {
        throw new HttpError(400, `node "${target.host}" is not known to the tunnel server: no connected agent advertises it`);
      }
      routeTo(ctx, node, target.port);
      return;
    }

    if (ctx.proxyDest !== undefined && ctx.proxyDest !== ctx.dialAddress) {
      if (splitAddress(ctx.proxyDest) === undefined) {
        throw new HttpError(400, `X-Tunnel-Proxy-Dest ${JSON.stringify(ctx.proxyDest)} is not ip:port`);
      }
      ctx.dialAddress = ctx.proxyDest;
    }
  };
}
