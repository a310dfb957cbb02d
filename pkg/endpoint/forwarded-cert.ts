// An agent's client certificate as a load balancer that terminated TLS
// forwards it: a header holding the URL-escaped PEM (nginx's
// $ssl_client_escaped_cert). Trusted only from the peers the operator names
// (--trusted-proxy-cidrs), and then checked as the TLS handshake checks a
// certificate presented directly: issued and signed by the agent CA, within
// its validity, for client authentication.

import { BlockList, isIP } from 'node:net';
import { X509Certificate } from 'node:crypto';
import type { AgentCertificate } from './admission.js';

/** The default header (nginx: `proxy_set_header X-SSL-Client-Cert $ssl_client_escaped_cert;`). */
export const DEFAULT_FORWARDED_CLIENT_CERT_HEADER = 'x-ssl-client-cert';

/** The extended key usage a client certificate is for (id-kp-clientAuth). */
const CLIENT_AUTH_EKU = '1.3.6.1.5.5.7.3.2';

/** Longest header value read (a PEM of a few KiB, escaped). */
const MAX_HEADER_LENGTH = 16 * 1024;

/** The peers whose forwarded certificates are believed. Empty: none. */
export class TrustedProxies {
  private readonly list = new BlockList();
  readonly size: number;

  /** `cidrs`: "10.0.0.0/8", "fd00::/64", or single addresses. Throws a TypeError naming a bad entry. */
  constructor(cidrs: readonly string[]) {
    for (const entry of cidrs) {
      const [address = '', prefix] = entry.trim().split('/');
      const family = isIP(address);
      if (family === 0) throw new TypeError(`trusted proxy ${JSON.stringify(entry)} is not an address or CIDR`);
      const bits = prefix === undefined ? (family === 4 ? 32 : 128) : Number(prefix);
      if (!Number.isInteger(bits) || bits < 0 || bits > (family === 4 ? 32 : 128)) {
        throw new TypeError(`trusted proxy ${JSON.stringify(entry)} has an invalid prefix length`);
      }
      this.list.addSubnet(address, bits, family === 4 ? 'ipv4' : 'ipv6');
    }
    this.size = cidrs.length;
  }

  /** Whether `address` (a socket's remoteAddress; IPv4-mapped IPv6 counts as IPv4) is a trusted proxy. */
  has(address: string | undefined): boolean {
    if (address === undefined || this.size === 0) return false;
    const v4 = address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
    const family = isIP(v4);
    if (family === 0) return false;
    return this.list.check(v4, family === 4 ? 'ipv4' : 'ipv6');
  }
}

/** The CA certificates of a PEM bundle. */
export function caCertificates(bundle: string): X509Certificate[] {
  const pems = bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return pems.map((pem) => new X509Certificate(pem));
}

/** "CN=edge-1\nO=x" (X509Certificate.subject) as getPeerCertificate's subject object. */
function subjectOf(subject: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const line of subject.split('\n')) {
    const at = line.indexOf('=');
    if (at <= 0) continue;
    const key = line.slice(0, at);
    const value = line.slice(at + 1);
    const had = out[key];
    out[key] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [had, value];
  }
  return out;
}

/**
 * The agent certificate in a forwarded header value, verified against
 * `cas`; an Error saying why it is not one.
 */
export function verifyForwardedCertificate(value: string, cas: readonly X509Certificate[], now = new Date()): AgentCertificate | Error {
  if (value.length > MAX_HEADER_LENGTH) return new Error(`the forwarded certificate is longer than ${MAX_HEADER_LENGTH} bytes`);
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(decodeURIComponent(value.trim()));
  } catch {
    return new Error('the forwarded certificate is not a URL-escaped PEM certificate');
  }
  const issuer = cas.find((ca) => cert.checkIssued(ca) && cert.verify(ca.publicKey));
  if (issuer === undefined) return new Error('the forwarded certificate is not signed by the agent CA');
  if (now < new Date(cert.validFrom) || now > new Date(cert.validTo)) {
    return new Error(`the forwarded certificate is not valid now (valid from ${cert.validFrom} to ${cert.validTo})`);
  }
  const eku = cert.keyUsage;
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when the certificate has no extended key usage, whatever @types/node says
  if (eku !== undefined && eku.length > 0 && !eku.includes(CLIENT_AUTH_EKU)) {
    return new Error('the forwarded certificate is not for client authentication (extended key usage)');
  }
  return {
    subject: subjectOf(cert.subject) as unknown as AgentCertificate['subject'],
    subjectaltname: cert.subjectAltName ?? '',
    fingerprint256: cert.fingerprint256,
  };
}
