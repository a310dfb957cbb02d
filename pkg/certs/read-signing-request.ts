// What a PKCS#10 certificate signing request asks for, read with node-forge:
// its subject attributes, its subject alternative names by kind, and whether
// its signature verifies (the requester holds the key). forge reads RSA keys
// only; a request with another key type throws here.

import forge from 'node-forge';
import { normalizeIP } from './read-certificate.js';

export interface SigningRequestSummary {
  /** Every subject attribute, in order, by short name (CN, O, OU…) or OID. */
  subject: { name: string; value: string }[];
  commonName: string;
  organizations: string[];
  dnsNames: string[];
  /** In one textual form (IPv6 compressed, lower case). */
  ips: string[];
  /** SANs of other kinds (email, URI, …), as `type:value`. */
  otherNames: string[];
  signatureValid: boolean;
}

interface AltName {
  type: number;
  value?: string;
  ip?: string;
}

const SAN_DNS = 2;
const SAN_IP = 7;

export function readSigningRequest(pem: string): SigningRequestSummary {
  const csr = forge.pki.certificationRequestFromPem(pem);
  const subject = csr.subject.attributes.map((a) => ({ name: a.shortName ?? a.type ?? '?', value: String(a.value) }));
  const altNames: AltName[] = [];
  const attrs = (csr as unknown as { attributes?: { name?: string; extensions?: { name?: string; altNames?: AltName[] }[] }[] }).attributes ?? [];
  for (const attr of attrs) {
    if (attr.name !== 'extensionRequest') continue;
    for (const ext of attr.extensions ?? []) if (ext.name === 'subjectAltName') altNames.push(...(ext.altNames ?? []));
  }
  return {
    subject,
    commonName: subject.filter((a) => a.name === 'CN').map((a) => a.value)[0] ?? '',
    organizations: subject.filter((a) => a.name === 'O').map((a) => a.value),
    dnsNames: altNames.filter((n) => n.type === SAN_DNS).map((n) => n.value ?? ''),
    ips: altNames.filter((n) => n.type === SAN_IP).map((n) => normalizeIP(n.ip ?? '')),
    otherNames: altNames.filter((n) => n.type !== SAN_DNS && n.type !== SAN_IP).map((n) => `${n.type}:${n.value ?? ''}`),
    signatureValid: csr.verify(),
  };
}
