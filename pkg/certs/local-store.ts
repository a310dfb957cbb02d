// Local certificate mode: with no cluster to sign CSRs, the server keeps its
// own CA in --cert-dir and issues what it needs from it. Each function is
// level-based: it acts only when what is on disk does not match what is wanted,
// so running it twice changes nothing.

import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { ConfigError, errorCode } from '../protocol/errors.js';
import type { CertKeyPair } from './pki.js';
import { describeCertificate, invalidPrintableStrings, sameAddressSet } from './read-certificate.js';

export const CA_CERT_FILE = 'ca.crt';
export const CA_KEY_FILE = 'ca.key';
export const SERVER_CERT_FILE = 'tunnel-server.crt';
export const SERVER_KEY_FILE = 'tunnel-server.key';
export const PROXY_CLIENT_CERT_FILE = 'tunnel-proxy-client.crt';
export const PROXY_CLIENT_KEY_FILE = 'tunnel-proxy-client.key';

/** Subjects as OpenYurt uses them, so RBAC written for OpenYurt applies. */
export const SERVER_COMMON_NAME = 'system:node:tunnel-server';
export const SERVER_ORGANIZATION = 'system:nodes';
export const PROXY_CLIENT_COMMON_NAME = 'tunnel-proxy-client';
export const AGENT_COMMON_NAME = 'tunnel-agent-client';
export const YURTTUNNEL_ORGANIZATION = 'openyurt:yurttunnel';

/** node-forge's issuing code, loaded only when a certificate must be made (read-certificate.ts says why). */
const pki = (): Promise<typeof import('./pki.js')> => import('./pki.js');

/** Renew a certificate when less than this much of its life is left. */
const RENEW_BEFORE_MS = 30 * 24 * 60 * 60 * 1000;

export interface LocalCertificates {
  /** The CA certificate, PEM. */
  ca: string;
  /** The CA certificate and key. */
  caPair: CertKeyPair;
  server: CertKeyPair;
  proxyClient: CertKeyPair;
  /** What was created or renewed in this call, for the log. */
  changed: string[];
  /** Set when an unreadable CA was replaced: agents' certificates must be issued again. */
  caReplacedBecause?: string;
}

export interface LocalServerCertOptions {
  certDir: string;
  certIPs?: readonly string[];
  certDNSNames?: readonly string[];
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err: unknown) {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  }
}

/** Writes atomically (temp file + rename) so a crash never leaves half a key. */
async function writeAtomic(path: string, data: string, mode: number): Promise<void> {
  const tmp = `${path}.tmp-${process.pid}`;
  await writeFile(tmp, data, { mode });
  await rename(tmp, path);
}

async function readPair(dir: string, certFile: string, keyFile: string): Promise<CertKeyPair | undefined> {
  const [cert, key] = await Promise.all([readIfExists(join(dir, certFile)), readIfExists(join(dir, keyFile))]);
  if (cert === undefined && key === undefined) return undefined;
  if (cert === undefined || key === undefined) {
    throw new ConfigError(
      'YT_ERR_CERT_DIR',
      `${join(dir, cert === undefined ? certFile : keyFile)} is missing but its pair exists; ` +
        `remove ${join(dir, certFile)} and ${join(dir, keyFile)} to have them created again`,
    );
  }
  return { cert, key };
}

async function writePair(dir: string, certFile: string, keyFile: string, pair: CertKeyPair): Promise<void> {
  await writeAtomic(join(dir, keyFile), pair.key, 0o600);
  await writeAtomic(join(dir, certFile), pair.cert, 0o644);
}

export interface LocalCA {
  ca: CertKeyPair;
  created: boolean;
  /**
   * Why an existing CA was replaced (its names are unreadable to Go's x509, as
   * versions before 0.2 wrote them); every certificate it issued, agents'
   * included, must be issued again.
   */
  replacedBecause?: string;
}

/** Why Go clients cannot read `certPem`, or undefined if they can. */
function unreadableByGo(certPem: string): string | undefined {
  const bad = invalidPrintableStrings(certPem);
  if (bad.length === 0) return undefined;
  return `PrintableString holding characters it may not (${bad.join('; ')}); Go's crypto/x509 refuses such names`;
}

/** Loads `ca.crt`/`ca.key` from `certDir`, creating them if neither exists or replacing a CA Go cannot read. */
export async function loadOrCreateLocalCA(certDir: string): Promise<LocalCA> {
  await mkdir(certDir, { recursive: true, mode: 0o700 });
  const existing = await readPair(certDir, CA_CERT_FILE, CA_KEY_FILE);
  const unreadable = existing === undefined ? undefined : unreadableByGo(existing.cert);
  if (existing !== undefined && unreadable === undefined) return { ca: existing, created: false };
  const { createCA } = await pki();
  const ca = createCA(`yurt-tunnel-local-ca@${Math.floor(Date.now() / 1000)}`);
  await writePair(certDir, CA_CERT_FILE, CA_KEY_FILE, ca);
  return unreadable === undefined ? { ca, created: true } : { ca, created: true, replacedBecause: unreadable };
}

function needsRenewal(pair: CertKeyPair | undefined, wantIPs: readonly string[], wantDNS: readonly string[]): boolean {
  if (pair === undefined || unreadableByGo(pair.cert) !== undefined) return true;
  const have = describeCertificate(pair.cert);
  if (have.notAfter.getTime() - Date.now() < RENEW_BEFORE_MS) return true;
  return !sameAddressSet(have.ips, wantIPs) || !sameAddressSet(have.dnsNames, wantDNS);
}

function unique(values: readonly string[]): string[] {
  return [...new Set(values.filter((v) => v.length > 0))];
}

/**
 * Ensures the local CA, the server's serving certificate (SANs: `certIPs`,
 * `certDNSNames`, loopback, localhost and the host name) and the proxy-client
 * certificate exist in `certDir`.
 */
export async function ensureLocalServerCertificates(opts: LocalServerCertOptions): Promise<LocalCertificates> {
  const { ca, created, replacedBecause } = await loadOrCreateLocalCA(opts.certDir);
  const changed: string[] = created ? [CA_CERT_FILE] : [];

  const ips = unique([...(opts.certIPs ?? []), '127.0.0.1', '::1']);
  const dnsNames = unique([...(opts.certDNSNames ?? []), 'localhost', hostname()]);
  let server = await readPair(opts.certDir, SERVER_CERT_FILE, SERVER_KEY_FILE);
  if (created || needsRenewal(server, ips, dnsNames)) {
    const { issueCertificate } = await pki();
    server = issueCertificate(ca, {
      commonName: SERVER_COMMON_NAME,
      organizations: [SERVER_ORGANIZATION],
      dnsNames,
      ips,
      usages: ['serverAuth'],
    });
    await writePair(opts.certDir, SERVER_CERT_FILE, SERVER_KEY_FILE, server);
    changed.push(SERVER_CERT_FILE);
  }

  let proxyClient = await readPair(opts.certDir, PROXY_CLIENT_CERT_FILE, PROXY_CLIENT_KEY_FILE);
  if (created || needsRenewal(proxyClient, [], [])) {
    const { issueCertificate } = await pki();
    proxyClient = issueCertificate(ca, {
      commonName: PROXY_CLIENT_COMMON_NAME,
      organizations: [YURTTUNNEL_ORGANIZATION],
      usages: ['clientAuth'],
    });
    await writePair(opts.certDir, PROXY_CLIENT_CERT_FILE, PROXY_CLIENT_KEY_FILE, proxyClient);
    changed.push(PROXY_CLIENT_CERT_FILE);
  }
  const result: LocalCertificates = { ca: ca.cert, caPair: ca, server: server!, proxyClient: proxyClient!, changed };
  if (replacedBecause !== undefined) result.caReplacedBecause = replacedBecause;
  return result;
}

export interface AgentCertificateFiles {
  caFile: string;
  certFile: string;
  keyFile: string;
}

/**
 * Issues an agent client certificate from the local CA in `certDir` (which
 * must exist: a second CA would only make certificates nobody trusts) and writes
 * `ca.crt`, `tls.crt` and `tls.key` into `outDir`. The node name goes into a
 * DNS SAN, as OpenYurt's agent certificates carry it.
 */
export async function writeAgentCertificate(opts: {
  certDir: string;
  nodeName: string;
  outDir: string;
  nodeIPs?: readonly string[];
}): Promise<AgentCertificateFiles> {
  if (opts.nodeName.length === 0) throw new TypeError('a node name is required for an agent certificate');
  const ca = await readPair(opts.certDir, CA_CERT_FILE, CA_KEY_FILE);
  if (ca === undefined) {
    throw new ConfigError(
      'YT_ERR_CERT_DIR',
      `no CA in ${opts.certDir} (${CA_CERT_FILE}, ${CA_KEY_FILE}); start yurt-tunnel-server with --cert-dir ${opts.certDir} once, ` +
        "or point --cert-dir at the server's certificate directory",
    );
  }
  const unreadable = unreadableByGo(ca.cert);
  if (unreadable !== undefined) {
    throw new ConfigError(
      'YT_ERR_CERT_DIR',
      `the CA in ${join(opts.certDir, CA_CERT_FILE)} was written by an older version: ${unreadable}. ` +
        `Start yurt-tunnel-server with --cert-dir ${opts.certDir} once to replace it, then issue agent certificates again`,
    );
  }
  const { issueCertificate } = await pki();
  const pair = issueCertificate(ca, {
    commonName: AGENT_COMMON_NAME,
    organizations: [YURTTUNNEL_ORGANIZATION],
    dnsNames: [opts.nodeName],
    ips: opts.nodeIPs ?? [],
    usages: ['clientAuth'],
  });
  await mkdir(opts.outDir, { recursive: true, mode: 0o700 });
  const files = {
    caFile: join(opts.outDir, 'ca.crt'),
    certFile: join(opts.outDir, 'tls.crt'),
    keyFile: join(opts.outDir, 'tls.key'),
  };
  await writeAtomic(files.caFile, ca.cert, 0o644);
  await writeAtomic(files.keyFile, pair.key, 0o600);
  await writeAtomic(files.certFile, pair.cert, 0o644);
  return files;
}
