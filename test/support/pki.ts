// Certificates for tests: one CA per test process (made on first use), leaf
// certificates issued from it, and a second CA whose certificates must be refused.

import { writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { parseAgentIdentifiers } from '../../pkg/protocol/identifiers.js';
import { createCA, issueCertificate, type CertKeyPair, type CertificateRequest } from '../../pkg/certs/pki.js';

export interface TestPKI {
  ca: CertKeyPair;
  /** Serving certificate for 127.0.0.1, ::1 and localhost. */
  server: CertKeyPair;
  /** Client certificate of an agent (CN tunnel-agent-client, DNS SAN = node name). */
  /** An agent certificate naming `nodeName` and, as SANs, the hosts and addresses in `identifiers`. */
  agent(nodeName: string, identifiers?: string): CertKeyPair;
  /** Any certificate from this CA. */
  issue(req: CertificateRequest): CertKeyPair;
  /** A CA the tunnel does not trust, and a client certificate from it. */
  foreign: { ca: CertKeyPair; client: CertKeyPair };
}

let cached: TestPKI | undefined;

export function testPKI(): TestPKI {
  if (cached !== undefined) return cached;
  const ca = createCA('yurt-tunnel-test-ca');
  const agents = new Map<string, CertKeyPair>();
  const foreignCA = createCA('some-other-ca');
  cached = {
    ca,
    server: issueCertificate(ca, {
      commonName: 'system:node:tunnel-server',
      organizations: ['system:nodes'],
      ips: ['127.0.0.1', '::1'],
      dnsNames: ['localhost'],
      usages: ['serverAuth'],
    }),
    agent(nodeName, identifiers = '') {
      const key = `${nodeName}|${identifiers}`;
      let pair = agents.get(key);
      if (pair === undefined) {
        // The certificate names what the agent will claim, as the server's identity check wants.
        const ids = parseAgentIdentifiers(identifiers);
        pair = issueCertificate(ca, {
          commonName: 'tunnel-agent-client',
          organizations: ['openyurt:yurttunnel'],
          dnsNames: [...new Set([nodeName, ...ids.host])],
          ips: [...ids.ipv4, ...ids.ipv6].filter((ip) => isIP(ip) !== 0),
          usages: ['clientAuth'],
        });
        agents.set(key, pair);
      }
      return pair;
    },
    issue: (req) => issueCertificate(ca, req),
    foreign: {
      ca: foreignCA,
      client: issueCertificate(foreignCA, {
        commonName: 'tunnel-agent-client',
        organizations: ['openyurt:yurttunnel'],
        dnsNames: ['intruder'],
        usages: ['clientAuth'],
      }),
    },
  };
  return cached;
}

/** Writes `pair` and the CA into `dir` as tls.crt, tls.key and ca.crt, for a process that reads files. */
export async function writePKIFiles(dir: string, pair: CertKeyPair, ca: CertKeyPair): Promise<{ certFile: string; keyFile: string; caFile: string }> {
  const files = { certFile: join(dir, 'tls.crt'), keyFile: join(dir, 'tls.key'), caFile: join(dir, 'ca.crt') };
  await writeFile(files.certFile, pair.cert);
  await writeFile(files.keyFile, pair.key, { mode: 0o600 });
  await writeFile(files.caFile, ca.cert);
  return files;
}
