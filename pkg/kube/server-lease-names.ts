// Konnectivity's lease-based server count (apiserver-network-proxy v0.31+,
// #643): the names, label and durations both sides agree on. Kept apart from
// the code that talks to the API, so the CLIs read the defaults without
// loading @kubernetes/client-node.

/** A server's Lease is this prefix and its serverID. */
export const SERVER_LEASE_PREFIX = 'konnectivity-proxy-server-';
export const DEFAULT_LEASE_NAMESPACE = 'kube-system';
/** The server's --lease-label and the agent's --lease-label-selector. */
export const DEFAULT_LEASE_LABEL = 'k8s-app=konnectivity-server';
export const DEFAULT_LEASE_DURATION_MS = 30_000;
export const DEFAULT_LEASE_RENEW_INTERVAL_MS = 15_000;
export const DEFAULT_LEASE_GC_INTERVAL_MS = 15_000;

export function serverLeaseName(serverID: string): string {
  return `${SERVER_LEASE_PREFIX}${serverID}`;
}

/** The labels of `--lease-label` ("k=v" or "k1=v1,k2=v2"); throws naming the flag. */
export function parseLeaseLabels(text: string, flag = '--lease-label'): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const part of text.split(',').map((s) => s.trim())) {
    const eq = part.indexOf('=');
    const key = part.slice(0, eq);
    const value = part.slice(eq + 1);
    if (eq <= 0 || !/^([a-z0-9.-]+\/)?[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/.test(key) || !/^([A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?)?$/.test(value)) {
      throw new TypeError(`${flag}: ${JSON.stringify(part)} is not a label key=value (e.g. ${DEFAULT_LEASE_LABEL})`);
    }
    labels[key] = value;
  }
  return labels;
}

/** The label selector that matches exactly those labels. */
export function labelSelectorOf(labels: Record<string, string>): string {
  return Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

/** A Lease's spec, as far as its validity goes (times as the API gives them: Date or RFC 3339 text). */
export interface LeaseTimes {
  renewTime?: Date | string | undefined;
  acquireTime?: Date | string | undefined;
  leaseDurationSeconds?: number | undefined;
}

/**
 * Upstream's IsLeaseValid (pkg/util/leases.go): renewTime, else acquireTime,
 * plus leaseDurationSeconds is after now; neither time set means expired.
 */
export function isLeaseValid(spec: LeaseTimes | undefined, now = Date.now()): boolean {
  const t = spec?.renewTime ?? spec?.acquireTime;
  if (t === undefined) return false;
  const at = new Date(t).getTime();
  if (Number.isNaN(at)) return false;
  return at + (spec?.leaseDurationSeconds ?? 0) * 1000 > now;
}
