// Each certificate's notAfter as a gauge, read at scrape time from the
// certificate in use, so a rotation shows at the next scrape. The role is the
// only label (a fixed handful per process), never a subject or a node name.

import { X509Certificate } from 'node:crypto';
import { Gauge, type Registry } from './prom.js';

/** The certificates a process presents: the server's serving and proxy-client ones, the agent's client one. */
export type CertificateRole = 'serving' | 'proxy_client' | 'agent_client';

/** The PEM in use for a role now (first certificate of a chain), or undefined while there is none. */
export type CurrentCertificates = Partial<Record<CertificateRole, () => string | undefined>>;

/** notAfter of a PEM in seconds since the epoch; undefined when it does not parse. */
function notAfterSeconds(pem: string): number | undefined {
  try {
    return Date.parse(new X509Certificate(pem).validTo) / 1000;
  } catch {
    // A PEM we cannot read is reported by the code that loads it; here it is only left out of the scrape.
    return undefined;
  }
}

export function watchCertificateExpiry(registry: Registry, current: CurrentCertificates): void {
  // Parsing costs ~50 µs: keep the last answer per role until the PEM changes.
  const parsed = new Map<CertificateRole, { pem: string; seconds: number | undefined }>();
  new Gauge({
    name: 'yurttunnel_certificate_expiry_timestamp_seconds',
    help: 'notAfter of the certificate in use, in seconds since the epoch, by role (serving, proxy_client, agent_client).',
    labelNames: ['role'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [role, read] of Object.entries(current) as Array<[CertificateRole, () => string | undefined]>) {
        const pem = read();
        if (pem === undefined) continue;
        let entry = parsed.get(role);
        if (entry?.pem !== pem) {
          entry = { pem, seconds: notAfterSeconds(pem) };
          parsed.set(role, entry);
        }
        if (entry.seconds !== undefined) this.set({ role }, entry.seconds);
      }
    },
  });
}
