// Finds the node a request is for (OpenYurt's TraceReq, without its bugs).
// kube-apiserver's requests do not all carry the kubelet's address in Host:
// exec, attach and port-forward pass kubectl's Host (the apiserver's own
// address), and node-proxy requests carry it too. So, in order:
//  1. /exec|attach|portForward|containerLogs/{ns}/{pod}/... → the pod's node;
//  2. X-Forwarded-Uri /api/v1/nodes/{node}/proxy/... → that node;
//  3. a TLS server name that names a node (a caller that dialled the node by name);
//  4. a Host that is a name → that node (an unknown name gets 400);
//  5. a Host that is an IP → as is, or X-Tunnel-Proxy-Dest (ip:port) for direct callers.
// It sets the dial address to the node's address and kubelet port and
// X-Tunnel-Proxy-Host to its name, unless the caller already chose one.

import { isIP } from 'node:net';
import type { Logger } from '../../log/logger.js';
import { DEFAULT_KUBELET_PORT, type NodeInfo, type NodeResolver } from '../../nodes/node-resolver.js';
import { joinAddress, splitAddress, type RequestContext } from '../request-context.js';
import type { Middleware } from './middleware.js';
import { HttpError } from '../errors.js';

const POD_PATH = /^\/(?:exec|attach|portForward|containerLogs)\/([^/?]+)\/([^/?]+)/;
const NODE_PROXY = /^\/api\/v1\/nodes\/([^/?]+)\/proxy(?:[/?]|$)/;

function routeTo(ctx: RequestContext, node: NodeInfo, port: number): void {
  const address = node.addresses[0];
  if (address === undefined) {
    throw new HttpError(400, `node "${node.name}" has no known address (no InternalIP, and its agent advertises no ipv4 or ipv6 identifier)`);
  }
  ctx.dialAddress = joinAddress(address, port);
  ctx.proxyHost ??= node.name;
}

/** A percent-encoded path segment, decoded; malformed encoding is the caller's error (400). */
function decodeSegment(segment: string, where: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new HttpError(400, `${where} has a malformed percent-encoding in ${JSON.stringify(segment.slice(0, 200))}`);
  }
}

/** "edge-1", "edge-1:10250" or "https:edge-1:10250" (Kubernetes' node proxy name forms). */
function parseProxiedNode(segment: string): { name: string; port: number | undefined } {
  const parts = decodeSegment(segment, 'X-Forwarded-Uri').split(':');
  if (parts.length >= 2 && /^https?$/.test(parts[0]!)) parts.shift();
  const port = parts.length === 2 && /^\d+$/.test(parts[1]!) ? Number(parts[1]) : undefined;
  return { name: parts[0]!, port };
}

function unknownHint(resolver: NodeResolver): string {
  return resolver.unknownNodeHint ?? 'no connected agent advertises it';
}

/**
 * Steps 4 and 5 alone: a destination that names a node goes to the node's
 * address (an unknown name gets 400); an IP goes as it is. The HTTP proxy
 * routes its absolute URIs and CONNECT targets with it: their host is the
 * destination itself, never a hint about one.
 */
export function routeByHost(ctx: RequestContext, resolver: NodeResolver): void {
  const target = splitAddress(ctx.dialAddress);
  if (target === undefined) throw new HttpError(400, `destination ${JSON.stringify(ctx.dialAddress)} is not host:port`);
  if (isIP(target.host) !== 0) return;
  const node = resolver.node(target.host);
  if (node === undefined) throw new HttpError(400, `node "${target.host}" is not known to the tunnel server: ${unknownHint(resolver)}`);
  routeTo(ctx, node, target.port);
}

export function traceRequest(resolver: NodeResolver, log: Logger): Middleware {
  return (ctx) => {
    const target = splitAddress(ctx.dialAddress);
    if (target === undefined) throw new HttpError(400, `Host ${JSON.stringify(ctx.dialAddress)} is not host:port`);

    const pod = POD_PATH.exec(ctx.url);
    if (pod !== null) {
      const [namespace, name] = [decodeSegment(pod[1]!, 'the request path'), decodeSegment(pod[2]!, 'the request path')];
      const node = resolver.podNode(namespace, name);
      if (node !== undefined) {
        routeTo(ctx, node, node.kubeletPort ?? target.port);
        return;
      }
      if (log.enabled(4)) log.verbose(4, 'pod not known; routing by the other clues', { namespace, pod: name, host: ctx.dialAddress });
    }

    const proxied = ctx.forwardedUri === undefined ? null : NODE_PROXY.exec(ctx.forwardedUri);
    if (proxied !== null) {
      const { name, port } = parseProxiedNode(proxied[1]!);
      const node = resolver.node(name);
      if (node === undefined) throw new HttpError(400, `node "${name}" is not known to the tunnel server: ${unknownHint(resolver)}`);
      routeTo(ctx, node, port ?? node.kubeletPort ?? DEFAULT_KUBELET_PORT);
      return;
    }

    if (ctx.serverName !== undefined && isIP(ctx.serverName) === 0) {
      const node = resolver.node(ctx.serverName);
      if (node !== undefined) {
        routeTo(ctx, node, node.kubeletPort ?? target.port);
        return;
      }
    }

    if (isIP(target.host) === 0) {
      routeByHost(ctx, resolver);
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
