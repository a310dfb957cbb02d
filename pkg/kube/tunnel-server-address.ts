// Where an edge agent dials the tunnel server when --tunnelserver-addr is not
// given (spec/yurttunnel.md §6), from Service kube-system/x-tunnel-server-svc,
// by its type, the same addresses the server's certificate names
// (tunnel-addresses.ts):
//   - LoadBalancer: its ingress IP or hostname, on the port named `tcp`;
//   - NodePort: a cloud node's InternalIP (label openyurt.io/is-edge-worker=false,
//     Ready ones first), on the `tcp` port's nodePort;
//   - ClusterIP: the `x-tunnel-server-external-addr` annotation, its host and
//     its port (OpenYurt drops the port); without it there is no address:
//     a ClusterIP is not reachable from an edge node, so it is never used.
// When nothing fits, the answer says what is wrong and what to set.

import { isIP } from 'node:net';
import type { V1Node, V1Service, V1ServicePort } from '@kubernetes/client-node';
import { EDGE_WORKER_LABEL, EXTERNAL_ADDR_ANNOTATION, TUNNEL_NAMESPACE, TUNNEL_SERVICE } from './tunnel-addresses.js';

export const TUNNEL_SERVICE_PORT_NAME = 'tcp';
/** The nodes a NodePort Service is reached by. */
export const CLOUD_NODE_SELECTOR = `${EDGE_WORKER_LABEL}=false`;

export type ServerAddressResult = { address: string; from: string } | { problem: string };

const SERVICE = `${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE}`;
const REMEDY =
  `annotate the Service with the address edge nodes reach the server's agent port by ` +
  `(kubectl -n ${TUNNEL_NAMESPACE} annotate service ${TUNNEL_SERVICE} ${EXTERNAL_ADDR_ANNOTATION}=<host>:<port>), ` +
  'make it a NodePort or LoadBalancer Service, or start the agent with --tunnelserver-addr=<host>:<port>';

export function joinHostPort(host: string, port: number | string): string {
  return isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;
}

/** "host:port", "[v6]:port", or a bare host; undefined parts when absent or malformed. */
export function splitAnnotation(value: string): { host: string; port?: number } | undefined {
  const v = value.trim();
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(v);
  let host: string;
  let port: string | undefined;
  if (bracketed !== null) {
    host = bracketed[1]!;
    port = bracketed[2];
  } else if (isIP(v) === 6) {
    host = v;
  } else {
    const colon = v.lastIndexOf(':');
    host = colon >= 0 ? v.slice(0, colon) : v;
    port = colon >= 0 ? v.slice(colon + 1) : undefined;
  }
  if (host === '' || /[\s/]/.test(host)) return undefined;
  if (port === undefined) return { host };
  const n = Number(port);
  if (!/^\d+$/.test(port) || n < 1 || n > 65535) return undefined;
  return { host, port: n };
}

function isReady(node: V1Node): boolean {
  return (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** `svc` is the Service (undefined when it does not exist); `cloudNodes` the nodes labelled is-edge-worker=false. */
export function tunnelServerAddress(svc: V1Service | undefined, cloudNodes: readonly V1Node[]): ServerAddressResult {
  if (svc === undefined) {
    return { problem: `Service ${SERVICE} does not exist: create it (manifests/), or start the agent with --tunnelserver-addr=<host>:<port>` };
  }
  const type = svc.spec?.type ?? 'ClusterIP';
  const ports = svc.spec?.ports ?? [];
  const port: V1ServicePort | undefined = ports.find((p) => p.name === TUNNEL_SERVICE_PORT_NAME) ?? (ports.length === 1 ? ports[0] : undefined);
  if (port === undefined) {
    return {
      problem: `Service ${SERVICE} has no port named "${TUNNEL_SERVICE_PORT_NAME}" (the server's agent port, 10262): add it, or start the agent with --tunnelserver-addr=<host>:<port>`,
    };
  }
  switch (type) {
    case 'LoadBalancer': {
      const ingress = (svc.status?.loadBalancer?.ingress ?? []).find((i) => (i.ip ?? i.hostname ?? '') !== '');
      if (ingress === undefined) {
        return {
          problem: `Service ${SERVICE} is a LoadBalancer without an ingress address yet (status.loadBalancer.ingress is empty); waiting for the load balancer, or ${REMEDY}`,
        };
      }
      const host = ingress.ip !== undefined && ingress.ip !== '' ? ingress.ip : ingress.hostname!;
      return { address: joinHostPort(host, port.port), from: `the ingress of LoadBalancer Service ${SERVICE}` };
    }
    case 'NodePort': {
      if (port.nodePort === undefined || port.nodePort === 0)
        return { problem: `Service ${SERVICE} is a NodePort Service whose port "${port.name ?? ''}" has no nodePort yet` };
      const candidates = [...cloudNodes]
        .sort((a, b) => Number(isReady(b)) - Number(isReady(a)) || (a.metadata?.name ?? '').localeCompare(b.metadata?.name ?? ''))
        .map((n) => ({ name: n.metadata?.name ?? '', ip: n.status?.addresses?.find((a) => a.type === 'InternalIP' && a.address !== '')?.address }))
        .filter((n): n is { name: string; ip: string } => n.ip !== undefined);
      const first = candidates[0];
      if (first === undefined) {
        return {
          problem:
            `Service ${SERVICE} is a NodePort Service, but no node labelled ${CLOUD_NODE_SELECTOR} has an InternalIP to reach it by: ` +
            `label the cloud nodes (kubectl label node <name> ${CLOUD_NODE_SELECTOR}), or ${REMEDY}`,
        };
      }
      return { address: joinHostPort(first.ip, port.nodePort), from: `NodePort Service ${SERVICE} on cloud node ${first.name}` };
    }
    case 'ClusterIP': {
      const annotation = svc.metadata?.annotations?.[EXTERNAL_ADDR_ANNOTATION];
      if (annotation === undefined || annotation.trim() === '') {
        const clusterIP = svc.spec?.clusterIP ?? '';
        return {
          problem:
            `Service ${SERVICE} is a ClusterIP Service (${clusterIP}), which edge nodes cannot reach, and has no ` +
            `${EXTERNAL_ADDR_ANNOTATION} annotation: ${REMEDY}`,
        };
      }
      const parsed = splitAnnotation(annotation);
      if (parsed === undefined) {
        return {
          problem: `Service ${SERVICE}: annotation ${EXTERNAL_ADDR_ANNOTATION}=${JSON.stringify(annotation)} is not <host>:<port>; fix it, or start the agent with --tunnelserver-addr=<host>:<port>`,
        };
      }
      return { address: joinHostPort(parsed.host, parsed.port ?? port.port), from: `annotation ${EXTERNAL_ADDR_ANNOTATION} of Service ${SERVICE}` };
    }
    default:
      return {
        problem: `Service ${SERVICE} has type ${type}, by which agents cannot reach the server: make it NodePort, LoadBalancer, or ClusterIP with the ${EXTERNAL_ADDR_ANNOTATION} annotation, or start the agent with --tunnelserver-addr=<host>:<port>`,
      };
  }
}
