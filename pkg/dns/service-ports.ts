// The `dnat-<port>` ports of x-tunnel-server-internal-svc (spec/yurttunnel.md
// §4.1): for every proxy port P of the server ConfigMap, a TCP port `dnat-P`
// (port P, targetPort the master port of its scheme), so that `<node>:P`
// reaches the tunnel by DNS as `<node>:10250` does. `dnat-*` TCP ports no
// longer configured are dropped; every other port is left as it is.

import type { V1ServicePort } from '../kube/types.js';

/** The master port a proxy port lands on: secure (HTTPS, --secure-port) or insecure (HTTP, --insecure-port). */
export type MasterPortKind = 'secure' | 'insecure';

/** The numbers the master ports listen on: the `dnat-*` ports' targetPorts. */
export type MasterPorts = Record<MasterPortKind, number>;

export const DNAT_PORT_PREFIX = 'dnat-';

function isManaged(p: V1ServicePort): boolean {
  return (p.protocol ?? 'TCP') === 'TCP' && (p.name ?? '').startsWith(DNAT_PORT_PREFIX);
}

function sameManaged(a: V1ServicePort, b: V1ServicePort): boolean {
  return a.name === b.name && a.port === b.port && String(a.targetPort) === String(b.targetPort);
}

export interface ServicePortsPlan {
  /** The ports to write, or undefined when the Service already has them. */
  ports: V1ServicePort[] | undefined;
  /** Configured ports that cannot be added, and why (for a log line). */
  conflicts: string[];
}

export function planServicePorts(current: readonly V1ServicePort[], wanted: ReadonlyMap<number, MasterPortKind>, master: MasterPorts): ServicePortsPlan {
  const kept = current.filter((p) => !isManaged(p));
  const have = current.filter(isManaged);
  const conflicts: string[] = [];
  const managed: V1ServicePort[] = [];
  for (const [port, kind] of [...wanted].sort(([a], [b]) => a - b)) {
    const taken = kept.find((p) => p.port === port && (p.protocol ?? 'TCP') === 'TCP');
    if (taken !== undefined) {
      conflicts.push(`port ${port} is already the Service's port ${JSON.stringify(taken.name ?? '')}`);
      continue;
    }
    const want: V1ServicePort = { name: `${DNAT_PORT_PREFIX}${port}`, protocol: 'TCP', port, targetPort: master[kind] };
    // An unchanged port is kept as the API server returned it (defaults and all), so the comparison below holds.
    managed.push(have.find((p) => sameManaged(p, want)) ?? want);
  }
  const unchanged = managed.length === have.length && managed.every((m) => have.some((h) => sameManaged(h, m)));
  return { ports: unchanged ? undefined : [...kept, ...managed], conflicts };
}
