// Certificate authority and certificate issuing with node-forge.
//
// Keys are RSA-2048 made by Node's native generator (forge's pure-JS one is
// slow); forge builds and signs the X.509 structures. Only what issues or
// requests a certificate imports this module, and only when it does
// (read-certificate.ts says why); reading one needs only read-certificate.ts.

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import forge from 'node-forge';
import { CertificateRequestError } from './errors.js';
import { PRINTABLE } from './read-certificate.js';

export interface CertKeyPair {
  /** PEM certificate (or chain). */
  cert: string;
  /** PEM private key (PKCS#1). */
  key: string;
}

export type ExtendedKeyUsage = 'serverAuth' | 'clientAuth';

export interface CertificateRequest {
  commonName: string;
  organizations?: readonly string[];
  dnsNames?: readonly string[];
  ips?: readonly string[];
  usages: readonly ExtendedKeyUsage[];
  /** Default 365. */
  validityDays?: number;
}

const CLOCK_SKEW_MS = 5 * 60 * 1000;
const DAY_MS = 24 * 60 * 60 * 1000;

function newKeyPair(): { privateKey: forge.pki.rsa.PrivateKey; publicKey: forge.pki.rsa.PublicKey; keyPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs1', format: 'pem' }).toString();
  return {
    privateKey: forge.pki.privateKeyFromPem(keyPem),
    publicKey: forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString()),
    keyPem,
  };
}

/**
 * 126 random bits as a DER INTEGER's content, which forge writes as given: the
 * first byte must be neither 0 (a non-minimal encoding, which Go's x509 refuses
 * with "malformed serial number": kube-apiserver and Go agents, for 1 in 128
 * certificates when the top bit alone was cleared) nor over 0x7f (negative).
 */
export function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0]! & 0x3f) | 0x40;
  return bytes.toString('hex');
}

/** A name attribute written as Go and OpenSSL write it: PrintableString when it can be, else UTF8String. */
function nameAttribute(name: string, value: string): forge.pki.CertificateField {
  const valueTagClass = PRINTABLE.test(value) ? forge.asn1.Type.PRINTABLESTRING : forge.asn1.Type.UTF8;
  // forge's typings call the tag a Class; it is the universal type number.
  return { name, value, valueTagClass } as unknown as forge.pki.CertificateField;
}

/**
 * A parsed certificate's name, ready to be written again byte for byte: forge
 * keeps a parsed UTF8String as its UTF-8 bytes but encodes the value it is
 * given, so the bytes are decoded first.
 */
function reusableName(attributes: forge.pki.CertificateField[]): forge.pki.CertificateField[] {
  return attributes.map((a) => {
    const tag = (a as { valueTagClass?: number }).valueTagClass;
    return tag === forge.asn1.Type.UTF8 && typeof a.value === 'string' ? { ...a, value: forge.util.decodeUtf8(a.value) } : a;
  });
}

function subject(commonName: string, organizations: readonly string[] = []): forge.pki.CertificateField[] {
  return [...organizations.map((o) => nameAttribute('organizationName', o)), nameAttribute('commonName', commonName)];
}

function validity(cert: forge.pki.Certificate, days: number): void {
  const now = Date.now();
  cert.validity.notBefore = new Date(now - CLOCK_SKEW_MS);
  cert.validity.notAfter = new Date(now + days * DAY_MS);
}

/** Creates a self-signed CA. */
export function createCA(commonName: string, validityDays = 3650): CertKeyPair {
  const { privateKey, publicKey, keyPem } = newKeyPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = serialNumber();
  validity(cert, validityDays);
  cert.setSubject(subject(commonName));
  cert.setIssuer(subject(commonName));
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(privateKey, forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: keyPem };
}

/** Issues a leaf certificate signed by `ca`. */
export function issueCertificate(ca: CertKeyPair, req: CertificateRequest): CertKeyPair {
  const caCert = forge.pki.certificateFromPem(ca.cert);
  const caKey = forge.pki.privateKeyFromPem(ca.key);
  const { publicKey, keyPem } = newKeyPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = publicKey;
  cert.serialNumber = serialNumber();
  validity(cert, req.validityDays ?? 365);
  cert.setSubject(subject(req.commonName, req.organizations));
  cert.setIssuer(reusableName(caCert.subject.attributes));
  const altNames = subjectAltNames(req.dnsNames, req.ips);
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false, critical: true },
    {
      name: 'keyUsage',
      digitalSignature: true,
      keyEncipherment: true,
      critical: true,
    },
    {
      name: 'extKeyUsage',
      serverAuth: req.usages.includes('serverAuth'),
      clientAuth: req.usages.includes('clientAuth'),
    },
    { name: 'subjectKeyIdentifier' },
    { name: 'authorityKeyIdentifier', keyIdentifier: caCert.generateSubjectKeyIdentifier().getBytes() },
  ];
  if (altNames.length > 0) extensions.push({ name: 'subjectAltName', altNames });
  cert.setExtensions(extensions);
  cert.sign(caKey, forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: keyPem };
}

/** What a certificate signing request asks for. */
export interface SigningRequest {
  commonName: string;
  organizations?: readonly string[];
  dnsNames?: readonly string[];
  ips?: readonly string[];
}

function subjectAltNames(dnsNames: readonly string[] = [], ips: readonly string[] = []): object[] {
  return [
    ...dnsNames.map((value) => ({ type: 2, value })),
    ...ips.map((ip) => {
      if (isIP(ip) === 0) throw new TypeError(`not an IP address: ${JSON.stringify(ip)}`);
      return { type: 7, ip };
    }),
  ];
}

/** A new RSA key and a PKCS#10 request for it, names written as Go reads them. */
export function createSigningRequest(req: SigningRequest): { csr: string; key: string } {
  const { privateKey, publicKey, keyPem } = newKeyPair();
  const csr = forge.pki.createCertificationRequest();
  csr.publicKey = publicKey;
  csr.setSubject(subject(req.commonName, req.organizations));
  const altNames = subjectAltNames(req.dnsNames, req.ips);
  if (altNames.length > 0) {
    csr.setAttributes([{ name: 'extensionRequest', extensions: [{ name: 'subjectAltName', altNames }] }]);
  }
  csr.sign(privateKey, forge.md.sha256.create());
  return { csr: forge.pki.certificationRequestToPem(csr), key: keyPem };
}

/**
 * Signs a PKCS#10 request with `ca`, keeping its subject and SANs: what a
 * cluster signer does, for a local CA.
 */
export function signRequest(ca: CertKeyPair, csrPem: string, opts: { usages: readonly ExtendedKeyUsage[]; lifetimeMs: number; notBefore?: Date }): string {
  const csr = forge.pki.certificationRequestFromPem(csrPem);
  if (!csr.verify()) throw new CertificateRequestError('YT_ERR_CSR_INVALID', 'the certificate request is not signed by its own key');
  const caCert = forge.pki.certificateFromPem(ca.cert);
  const cert = forge.pki.createCertificate();
  cert.publicKey = csr.publicKey!;
  cert.serialNumber = serialNumber();
  const notBefore = opts.notBefore ?? new Date();
  cert.validity.notBefore = notBefore;
  cert.validity.notAfter = new Date(notBefore.getTime() + opts.lifetimeMs);
  cert.setSubject(reusableName(csr.subject.attributes));
  cert.setIssuer(reusableName(caCert.subject.attributes));
  const requested = (csr.getAttribute({ name: 'extensionRequest' }) as { extensions?: { name: string }[] } | null)?.extensions ?? [];
  const extensions: object[] = [
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: opts.usages.includes('serverAuth'), clientAuth: opts.usages.includes('clientAuth') },
    { name: 'authorityKeyIdentifier', keyIdentifier: caCert.generateSubjectKeyIdentifier().getBytes() },
    ...requested.filter((e) => e.name === 'subjectAltName'),
  ];
  cert.setExtensions(extensions);
  cert.sign(forge.pki.privateKeyFromPem(ca.key), forge.md.sha256.create());
  return forge.pki.certificateToPem(cert);
}
