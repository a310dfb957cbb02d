// Reading certificates with node:crypto alone: what the CLIs do at every
// start and in their steady state (names, expiry, names Go cannot read).
// Making certificates needs node-forge (pki.ts), which costs a process that
// loads it RSS for its whole life (the server's at ready, rehearsal off: 4-5
// MB), so only the code that issues or requests a certificate imports pki.ts,
// and only when it does.

import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';

export interface CertificateSummary {
  commonName: string;
  organizations: string[];
  dnsNames: string[];
  ips: string[];
  notBefore: Date;
  notAfter: Date;
}

/** Reads the names and expiry of a PEM certificate (the first in a chain). */
export function describeCertificate(certPem: string): CertificateSummary {
  const x = new X509Certificate(certPem);
  const dnsNames: string[] = [];
  const ips: string[] = [];
  for (const part of (x.subjectAltName ?? '').split(', ')) {
    if (part.startsWith('DNS:')) dnsNames.push(part.slice(4));
    else if (part.startsWith('IP Address:')) ips.push(normalizeIP(part.slice(11)));
  }
  const commonName = /^CN=(.*)$/m.exec(x.subject)?.[1] ?? '';
  const organizations = [...x.subject.matchAll(/^O=(.*)$/gm)].map((m) => m[1]!);
  return { commonName, organizations, dnsNames, ips, notBefore: new Date(x.validFrom), notAfter: new Date(x.validTo) };
}

export function normalizeIP(ip: string): string {
  // Node prints IPv6 SANs fully expanded and upper-case; compare in one form.
  if (isIP(ip) !== 6) return ip;
  return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
}

/** Compares two address lists as sets, in one textual form. */
export function sameAddressSet(a: readonly string[], b: readonly string[]): boolean {
  const na = new Set(a.map(normalizeIP));
  const nb = new Set(b.map(normalizeIP));
  return na.size === nb.size && [...na].every((v) => nb.has(v));
}

/** What ASN.1's PrintableString may hold; anything else must be a UTF8String or Go's x509 refuses the name. */
export const PRINTABLE = /^[A-Za-z0-9 '()+,\-./:=?]*$/;

const DER_SEQUENCE = 0x30;
const DER_SET = 0x31;
const DER_OID = 0x06;
const DER_PRINTABLE_STRING = 0x13;
const DER_CONTEXT_0 = 0xa0;

/** The short names of the attributes our certificates and OpenSSL's usual ones carry; others are shown as their OID. */
const SHORT_NAMES: Readonly<Record<string, string>> = {
  '2.5.4.3': 'CN',
  '2.5.4.6': 'C',
  '2.5.4.7': 'L',
  '2.5.4.8': 'ST',
  '2.5.4.10': 'O',
  '2.5.4.11': 'OU',
  '1.2.840.113549.1.9.1': 'E',
};

interface Element {
  tag: number;
  /** Where the contents start and end in the buffer. */
  start: number;
  end: number;
}

/** The DER element at `at`; throws on a length past `limit` (X509Certificate has parsed it already, so only a bug gets there). */
function element(der: Buffer, at: number, limit: number): Element {
  const tag = der[at]!;
  let length = der[at + 1]!;
  let start = at + 2;
  if (length >= 0x80) {
    const bytes = length & 0x7f;
    length = 0;
    for (let i = 0; i < bytes; i++) length = length * 256 + der[start + i]!;
    start += bytes;
  }
  if (start + length > limit) throw new RangeError(`DER element at ${at} runs past its parent's end`);
  return { tag, start, end: start + length };
}

function children(der: Buffer, parent: Element): Element[] {
  const out: Element[] = [];
  for (let at = parent.start; at < parent.end;) {
    const e = element(der, at, parent.end);
    out.push(e);
    at = e.end;
  }
  return out;
}

function oidText(der: Buffer, e: Element): string {
  const parts = [Math.floor(der[e.start]! / 40), der[e.start]! % 40];
  let value = 0;
  for (let i = e.start + 1; i < e.end; i++) {
    value = value * 128 + (der[i]! & 0x7f);
    if ((der[i]! & 0x80) === 0) {
      parts.push(value);
      value = 0;
    }
  }
  return parts.join('.');
}

/** The attributes of a Name (RDNSequence) written as PrintableString that hold what PrintableString may not. */
function badPrintables(der: Buffer, name: Element, where: string): string[] {
  const bad: string[] = [];
  for (const rdn of children(der, name)) {
    if (rdn.tag !== DER_SET) continue;
    for (const attribute of children(der, rdn)) {
      if (attribute.tag !== DER_SEQUENCE) continue;
      const [type, value] = children(der, attribute);
      if (type?.tag !== DER_OID || value?.tag !== DER_PRINTABLE_STRING) continue;
      const text = der.toString('latin1', value.start, value.end);
      if (PRINTABLE.test(text)) continue;
      const oid = oidText(der, type);
      bad.push(`${where} ${SHORT_NAMES[oid] ?? oid}=${text}`);
    }
  }
  return bad;
}

/**
 * Name attributes of a PEM certificate (subject and issuer) written as a
 * PrintableString that holds characters PrintableString may not: what older
 * versions wrote, and what Go's crypto/x509 refuses to parse.
 */
export function invalidPrintableStrings(certPem: string): string[] {
  const der = new X509Certificate(certPem).raw;
  const certificate = element(der, 0, der.length);
  const [tbs] = children(der, certificate);
  if (tbs === undefined) throw new RangeError('a certificate without its TBSCertificate');
  // TBSCertificate: [0] version (optional), serialNumber, signature, issuer, validity, subject, ...
  const fields = children(der, tbs);
  const from = fields[0]?.tag === DER_CONTEXT_0 ? 1 : 0;
  const issuer = fields[from + 2];
  const subject = fields[from + 4];
  if (issuer === undefined || subject === undefined) throw new RangeError('a TBSCertificate without its issuer or subject');
  return [...badPrintables(der, subject, 'subject'), ...badPrintables(der, issuer, 'issuer')];
}
