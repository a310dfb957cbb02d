// Certificates: what pki.ts issues must verify with Node's own X.509 code and
// work in a real mutual-TLS handshake; local-store.ts keeps the server's CA
// and certificates in --cert-dir, level-based (a second run changes nothing).
// RSA keys take ~0.1-0.3 s each, so the CA and two leaves are made once, and
// one --cert-dir is made once and copied for the tests that change it.

import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { once } from 'node:events';
import { copyFile, mkdir, mkdtemp, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { connect as tlsConnect, createServer as createTLSServer, type TLSSocket } from 'node:tls';
import {
  AGENT_COMMON_NAME,
  CA_CERT_FILE,
  CA_KEY_FILE,
  PROXY_CLIENT_CERT_FILE,
  PROXY_CLIENT_KEY_FILE,
  SERVER_CERT_FILE,
  SERVER_KEY_FILE,
  ensureLocalServerCertificates,
  writeAgentCertificate,
  type LocalCertificates,
} from '../../pkg/certs/local-store.js';
import { createCA, issueCertificate, type CertKeyPair } from '../../pkg/certs/pki.js';
import { describeCertificate, sameAddressSet } from '../../pkg/certs/read-certificate.js';
import { harness, type Harness } from '../support/harness.js';

const LIMIT = { timeout: 30_000 };
const DAY_MS = 24 * 60 * 60 * 1000;
const SERVER_AUTH = '1.3.6.1.5.5.7.3.1';
const CLIENT_AUTH = '1.3.6.1.5.5.7.3.2';

const ALL_FILES = [CA_CERT_FILE, CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE, PROXY_CLIENT_CERT_FILE, PROXY_CLIENT_KEY_FILE];

interface Pki {
  ca: CertKeyPair;
  server: CertKeyPair;
  client: CertKeyPair;
}

let pki: Pki | undefined;

/** One CA, a serving certificate and a 30-day client certificate, made on first use. */
function testPki(): Pki {
  if (pki !== undefined) return pki;
  const ca = createCA('yurt-tunnel-unit-ca');
  pki = {
    ca,
    server: issueCertificate(ca, {
      commonName: 'system:node:tunnel-server',
      organizations: ['system:nodes'],
      dnsNames: ['localhost', 'tunnel.example'],
      ips: ['127.0.0.1', 'fd00::a'],
      usages: ['serverAuth'],
    }),
    client: issueCertificate(ca, {
      commonName: 'tunnel-agent-client',
      organizations: ['openyurt:yurttunnel', 'second-org'],
      dnsNames: ['edge-1'],
      usages: ['clientAuth'],
      validityDays: 30,
    }),
  };
  return pki;
}

async function tempDir(h: Harness): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'yt-certs-'));
  h.defer(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function mode(path: string): Promise<number> {
  return (await stat(path)).mode & 0o777;
}

async function snapshot(dir: string): Promise<Map<string, { text: string; ino: number; mtimeMs: number }>> {
  const out = new Map<string, { text: string; ino: number; mtimeMs: number }>();
  for (const f of ALL_FILES) {
    const s = await stat(join(dir, f));
    out.set(f, { text: await readFile(join(dir, f), 'utf8'), ino: s.ino, mtimeMs: s.mtimeMs });
  }
  return out;
}

function assertSigned(certPem: string, caPem: string): void {
  const cert = new X509Certificate(certPem);
  const ca = new X509Certificate(caPem);
  assert.equal(cert.verify(ca.publicKey), true, 'signature does not verify with the CA key');
  assert.equal(cert.checkIssued(ca), true);
  assert.equal(cert.ca, false);
}

// --- pki.ts ---------------------------------------------------------------

test('createCA makes a self-signed CA certificate whose key matches', LIMIT, () => {
  const { ca } = testPki();
  const x = new X509Certificate(ca.cert);
  assert.equal(x.ca, true);
  assert.equal(x.subject, 'CN=yurt-tunnel-unit-ca');
  assert.equal(x.issuer, x.subject);
  assert.equal(x.verify(x.publicKey), true);
  assert.equal(x.checkPrivateKey(createPrivateKey(ca.key)), true);
  assert.ok(new Date(x.validFrom).getTime() <= Date.now());
  assert.ok(new Date(x.validTo).getTime() > Date.now() + 3000 * DAY_MS);
  assert.match(ca.key, /^-----BEGIN RSA PRIVATE KEY-----\n/);
});

test('an issued serving certificate verifies with the CA key, not with another key', LIMIT, () => {
  const { ca, server, client } = testPki();
  assertSigned(server.cert, ca.cert);
  const x = new X509Certificate(server.cert);
  assert.equal(x.verify(new X509Certificate(client.cert).publicKey), false);
  assert.equal(x.checkPrivateKey(createPrivateKey(server.key)), true);
  assert.equal(x.subject, 'O=system:nodes\nCN=system:node:tunnel-server');
  assert.equal(x.issuer, 'CN=yurt-tunnel-unit-ca');
});

test('the serving certificate names its DNS names and IPs, and nothing else', LIMIT, () => {
  const x = new X509Certificate(testPki().server.cert);
  assert.equal(x.checkHost('localhost'), 'localhost');
  assert.equal(x.checkHost('tunnel.example'), 'tunnel.example');
  assert.equal(x.checkHost('other.example'), undefined);
  assert.equal(x.checkIP('127.0.0.1'), '127.0.0.1');
  assert.equal(x.checkIP('fd00::a'), 'fd00::a');
  assert.equal(x.checkIP('127.0.0.2'), undefined);
  assert.equal(x.checkIP('::1'), undefined);
});

test('extended key usage: serverAuth only for the server, clientAuth only for the client', LIMIT, () => {
  const { server, client } = testPki();
  assert.deepEqual(new X509Certificate(server.cert).keyUsage, [SERVER_AUTH]);
  assert.deepEqual(new X509Certificate(client.cert).keyUsage, [CLIENT_AUTH]);
});

test('issueCertificate refuses an IP SAN that is not an IP', LIMIT, () => {
  assert.throws(() => issueCertificate(testPki().ca, { commonName: 'x', ips: ['node-a'], usages: ['clientAuth'] }), {
    name: 'TypeError',
    message: 'not an IP address: "node-a"',
  });
});

interface Handshake {
  serverSide: TLSSocket;
  clientSide: TLSSocket;
}

/** One TLS connection on 127.0.0.1; the server answers "hello <peer CN>". */
async function handshake(h: Harness, serverPair: CertKeyPair, clientPair: CertKeyPair, reject: boolean): Promise<Handshake> {
  const { ca } = testPki();
  const server = createTLSServer({ cert: serverPair.cert, key: serverPair.key, ca: ca.cert, requestCert: true, rejectUnauthorized: reject });
  h.defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'secureConnection') as Promise<[TLSSocket]>;
  const clientSide = tlsConnect({
    host: '127.0.0.1',
    port: (server.address() as AddressInfo).port,
    ca: ca.cert,
    cert: clientPair.cert,
    key: clientPair.key,
    rejectUnauthorized: reject,
  });
  h.defer(() => clientSide.destroy());
  await once(clientSide, 'secureConnect');
  const [serverSide] = await accepted;
  h.defer(() => serverSide.destroy());
  return { serverSide, clientSide };
}

test('a server with the serving cert and a client with the client cert complete mutual TLS on 127.0.0.1', LIMIT, async (t) => {
  const h = harness(t);
  const { server, client } = testPki();
  const { serverSide, clientSide } = await handshake(h, server, client, true);
  assert.equal(serverSide.authorized, true);
  assert.equal(clientSide.authorized, true);
  assert.equal(serverSide.getPeerCertificate().subject.CN, 'tunnel-agent-client');
  assert.equal(clientSide.getPeerCertificate().subject.CN, 'system:node:tunnel-server');
  serverSide.end(`hello ${String(serverSide.getPeerCertificate().subject.CN)}`);
  clientSide.end();
  const chunks: Buffer[] = [];
  for await (const c of clientSide) chunks.push(c as Buffer);
  assert.equal(Buffer.concat(chunks).toString(), 'hello tunnel-agent-client');
});

test('each certificate is refused in the other role (INVALID_PURPOSE)', LIMIT, async (t) => {
  const h = harness(t);
  const { server, client } = testPki();
  // Roles swapped; verification is reported rather than enforced so both sides' verdicts can be read.
  const { serverSide, clientSide } = await handshake(h, client, server, false);
  assert.equal(clientSide.authorized, false);
  assert.equal(clientSide.authorizationError, 'INVALID_PURPOSE');
  assert.equal(serverSide.authorized, false);
  assert.equal(serverSide.authorizationError, 'INVALID_PURPOSE');
});

test('describeCertificate reads names, organizations, SANs (IPv6 in short form) and expiry', LIMIT, () => {
  const { ca, server, client } = testPki();
  const s = describeCertificate(server.cert);
  assert.equal(s.commonName, 'system:node:tunnel-server');
  assert.deepEqual(s.organizations, ['system:nodes']);
  assert.deepEqual(s.dnsNames, ['localhost', 'tunnel.example']);
  assert.deepEqual(s.ips, ['127.0.0.1', 'fd00::a']);
  assert.ok(Math.abs(s.notAfter.getTime() - (Date.now() + 365 * DAY_MS)) < 10 * 60_000, s.notAfter.toISOString());

  const c = describeCertificate(client.cert);
  assert.equal(c.commonName, 'tunnel-agent-client');
  assert.deepEqual(c.organizations, ['openyurt:yurttunnel', 'second-org']);
  assert.deepEqual(c.dnsNames, ['edge-1']);
  assert.deepEqual(c.ips, []);
  assert.ok(Math.abs(c.notAfter.getTime() - (Date.now() + 30 * DAY_MS)) < 10 * 60_000, c.notAfter.toISOString());

  assert.deepEqual(describeCertificate(ca.cert), {
    commonName: 'yurt-tunnel-unit-ca',
    organizations: [],
    dnsNames: [],
    ips: [],
    notBefore: new Date(new X509Certificate(ca.cert).validFrom),
    notAfter: new Date(new X509Certificate(ca.cert).validTo),
  });
});

test('describeCertificate of a chain describes its first certificate', LIMIT, () => {
  const { ca, server } = testPki();
  assert.equal(describeCertificate(server.cert + ca.cert).commonName, 'system:node:tunnel-server');
});

test('sameAddressSet compares as sets, IPv6 in any spelling', LIMIT, () => {
  assert.equal(sameAddressSet(['127.0.0.1', 'fd00::a'], ['FD00:0:0:0:0:0:0:A', '127.0.0.1']), true);
  assert.equal(sameAddressSet(['10.0.0.1', '10.0.0.1'], ['10.0.0.1']), true);
  assert.equal(sameAddressSet(['10.0.0.1'], ['10.0.0.1', '10.0.0.2']), false);
  assert.equal(sameAddressSet(['10.0.0.1'], ['10.0.0.2']), false);
  assert.equal(sameAddressSet([], []), true);
});

// --- local-store.ts: the server's own CA ----------------------------------

const SEED_OPTIONS = { certIPs: ['10.0.0.1', 'fd00::1'], certDNSNames: ['tunnel.example'] };

let seed: Promise<{ certDir: string; got: LocalCertificates }> | undefined;
let seedRoot: string | undefined;

after(async () => {
  if (seedRoot !== undefined) await rm(seedRoot, { recursive: true, force: true });
});

/** One cert dir made by ensureLocalServerCertificates(SEED_OPTIONS), on first use; later tests work on copies. */
function seededCertDir(): Promise<{ certDir: string; got: LocalCertificates }> {
  seed ??= (async () => {
    seedRoot = await mkdtemp(join(tmpdir(), 'yt-certs-seed-'));
    const certDir = join(seedRoot, 'pki');
    return { certDir, got: await ensureLocalServerCertificates({ certDir, ...SEED_OPTIONS }) };
  })();
  return seed;
}

/** A fresh temp dir holding a byte-for-byte copy of the seeded cert dir. */
async function copyOfSeed(h: Harness): Promise<string> {
  const { certDir: from } = await seededCertDir();
  const certDir = await tempDir(h);
  for (const f of ALL_FILES) await copyFile(join(from, f), join(certDir, f));
  return certDir;
}

test('ensureLocalServerCertificates creates the CA, serving and proxy-client pairs, keys mode 0600', LIMIT, async () => {
  const { certDir, got } = await seededCertDir();
  assert.deepEqual(got.changed, [CA_CERT_FILE, SERVER_CERT_FILE, PROXY_CLIENT_CERT_FILE]);
  assert.equal(await mode(certDir), 0o700);
  for (const f of [CA_KEY_FILE, SERVER_KEY_FILE, PROXY_CLIENT_KEY_FILE]) assert.equal(await mode(join(certDir, f)), 0o600, f);

  const files = await snapshot(certDir);
  assert.equal(got.ca, files.get(CA_CERT_FILE)!.text);
  assert.deepEqual(got.caPair, { cert: files.get(CA_CERT_FILE)!.text, key: files.get(CA_KEY_FILE)!.text });
  assert.deepEqual(got.server, { cert: files.get(SERVER_CERT_FILE)!.text, key: files.get(SERVER_KEY_FILE)!.text });
  assert.deepEqual(got.proxyClient, { cert: files.get(PROXY_CLIENT_CERT_FILE)!.text, key: files.get(PROXY_CLIENT_KEY_FILE)!.text });

  assert.equal(new X509Certificate(got.ca).ca, true);
  assertSigned(got.server.cert, got.ca);
  assertSigned(got.proxyClient.cert, got.ca);
  assert.equal(new X509Certificate(got.server.cert).checkPrivateKey(createPrivateKey(got.server.key)), true);

  const server = describeCertificate(got.server.cert);
  assert.equal(server.commonName, 'system:node:tunnel-server');
  assert.deepEqual(server.organizations, ['system:nodes']);
  assert.deepEqual(server.ips, ['10.0.0.1', 'fd00::1', '127.0.0.1', '::1']);
  assert.deepEqual(server.dnsNames, [...new Set(['tunnel.example', 'localhost', hostname()])]);
  assert.deepEqual(new X509Certificate(got.server.cert).keyUsage, [SERVER_AUTH]);

  const proxy = describeCertificate(got.proxyClient.cert);
  assert.equal(proxy.commonName, 'tunnel-proxy-client');
  assert.deepEqual(proxy.organizations, ['openyurt:yurttunnel']);
  assert.deepEqual(new X509Certificate(got.proxyClient.cert).keyUsage, [CLIENT_AUTH]);
});

test('ensureLocalServerCertificates run again with the same options changes nothing', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await copyOfSeed(h);
  const before = await snapshot(certDir);
  const again = await ensureLocalServerCertificates({ certDir, ...SEED_OPTIONS });
  assert.deepEqual(again.changed, []);
  assert.deepEqual(await snapshot(certDir), before);
  assert.equal(again.server.cert, before.get(SERVER_CERT_FILE)!.text);
  assert.equal(again.ca, before.get(CA_CERT_FILE)!.text);
});

test('ensureLocalServerCertificates ignores order, duplicates and IPv6 spelling of the wanted SANs', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await copyOfSeed(h);
  const before = await snapshot(certDir);
  const again = await ensureLocalServerCertificates({
    certDir,
    certIPs: ['fd00:0:0:0:0:0:0:1', '10.0.0.1', '10.0.0.1', '127.0.0.1'],
    certDNSNames: ['localhost', 'tunnel.example', 'tunnel.example'],
  });
  assert.deepEqual(again.changed, []);
  assert.deepEqual(await snapshot(certDir), before);
});

test('changed certIPs reissue the serving certificate only, from the same CA', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await copyOfSeed(h);
  const before = await snapshot(certDir);
  const got = await ensureLocalServerCertificates({ certDir, certIPs: ['10.0.0.2'], certDNSNames: ['tunnel.example'] });
  assert.deepEqual(got.changed, [SERVER_CERT_FILE]);
  const after = await snapshot(certDir);
  for (const f of [CA_CERT_FILE, CA_KEY_FILE, PROXY_CLIENT_CERT_FILE, PROXY_CLIENT_KEY_FILE]) assert.deepEqual(after.get(f), before.get(f), f);
  assert.notEqual(after.get(SERVER_CERT_FILE)!.text, before.get(SERVER_CERT_FILE)!.text);
  assert.equal(await mode(join(certDir, SERVER_KEY_FILE)), 0o600);
  assertSigned(got.server.cert, before.get(CA_CERT_FILE)!.text);
  const x = new X509Certificate(got.server.cert);
  assert.equal(x.checkIP('10.0.0.2'), '10.0.0.2');
  assert.equal(x.checkIP('10.0.0.1'), undefined);
  assert.equal(x.checkPrivateKey(createPrivateKey(after.get(SERVER_KEY_FILE)!.text)), true);
});

test('an existing ca.crt without ca.key is an error naming the missing file, and nothing is written', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await tempDir(h);
  await writeFile(join(certDir, CA_CERT_FILE), testPki().ca.cert);
  await assert.rejects(ensureLocalServerCertificates({ certDir }), {
    name: 'ConfigError',
    code: 'YT_ERR_CERT_DIR',
    message:
      `${join(certDir, CA_KEY_FILE)} is missing but its pair exists; ` +
      `remove ${join(certDir, CA_CERT_FILE)} and ${join(certDir, CA_KEY_FILE)} to have them created again`,
  });
  for (const f of [CA_KEY_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE, PROXY_CLIENT_CERT_FILE]) {
    await assert.rejects(stat(join(certDir, f)), { code: 'ENOENT' }, f);
  }
});

test('an existing ca.key without ca.crt is an error naming ca.crt', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await tempDir(h);
  await writeFile(join(certDir, CA_KEY_FILE), testPki().ca.key, { mode: 0o600 });
  await assert.rejects(ensureLocalServerCertificates({ certDir }), {
    name: 'ConfigError',
    code: 'YT_ERR_CERT_DIR',
    message:
      `${join(certDir, CA_CERT_FILE)} is missing but its pair exists; ` +
      `remove ${join(certDir, CA_CERT_FILE)} and ${join(certDir, CA_KEY_FILE)} to have them created again`,
  });
});

test('a serving certificate whose key was lost is an error naming the key file', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await tempDir(h);
  // A CA already on disk: only the serving pair is looked at.
  await writeFile(join(certDir, CA_CERT_FILE), testPki().ca.cert);
  await writeFile(join(certDir, CA_KEY_FILE), testPki().ca.key, { mode: 0o600 });
  await writeFile(join(certDir, SERVER_CERT_FILE), testPki().server.cert);
  await assert.rejects(ensureLocalServerCertificates({ certDir }), {
    name: 'ConfigError',
    code: 'YT_ERR_CERT_DIR',
    message:
      `${join(certDir, SERVER_KEY_FILE)} is missing but its pair exists; ` +
      `remove ${join(certDir, SERVER_CERT_FILE)} and ${join(certDir, SERVER_KEY_FILE)} to have them created again`,
  });
});

// --- local-store.ts: agent certificates -----------------------------------

/** A cert dir holding only the test CA, as the server leaves it. */
async function certDirWithCA(h: Harness): Promise<string> {
  const certDir = await tempDir(h);
  await writeFile(join(certDir, CA_CERT_FILE), testPki().ca.cert);
  await writeFile(join(certDir, CA_KEY_FILE), testPki().ca.key, { mode: 0o600 });
  return certDir;
}

test('writeAgentCertificate writes ca.crt, tls.crt and tls.key: CN tunnel-agent-client, node name as DNS SAN', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await certDirWithCA(h);
  const outDir = join(await tempDir(h), 'agent', 'pki');
  const files = await writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir, nodeIPs: ['10.0.0.7'] });
  assert.deepEqual(files, { caFile: join(outDir, 'ca.crt'), certFile: join(outDir, 'tls.crt'), keyFile: join(outDir, 'tls.key') });
  assert.equal(await readFile(files.caFile, 'utf8'), testPki().ca.cert);
  assert.equal(await mode(files.keyFile), 0o600);
  assert.equal(await mode(outDir), 0o700);

  const cert = await readFile(files.certFile, 'utf8');
  assertSigned(cert, testPki().ca.cert);
  const x = new X509Certificate(cert);
  assert.equal(x.checkPrivateKey(createPrivateKey(await readFile(files.keyFile, 'utf8'))), true);
  assert.deepEqual(x.keyUsage, [CLIENT_AUTH]);
  const d = describeCertificate(cert);
  assert.equal(d.commonName, AGENT_COMMON_NAME);
  assert.equal(d.commonName, 'tunnel-agent-client');
  assert.deepEqual(d.organizations, ['openyurt:yurttunnel']);
  assert.deepEqual(d.dnsNames, ['edge-1']);
  assert.deepEqual(d.ips, ['10.0.0.7']);
});

test('writeAgentCertificate fails with a clear message when the cert dir has no CA, writing nothing', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await tempDir(h);
  const outDir = join(await tempDir(h), 'out');
  await assert.rejects(writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir }), {
    name: 'ConfigError',
    code: 'YT_ERR_CERT_DIR',
    message:
      `no CA in ${certDir} (ca.crt, ca.key); start yurt-tunnel-server with --cert-dir ${certDir} once, ` +
      "or point --cert-dir at the server's certificate directory",
  });
  await assert.rejects(stat(outDir), { code: 'ENOENT' });
  // A CA was not created as a side effect.
  await assert.rejects(stat(join(certDir, CA_CERT_FILE)), { code: 'ENOENT' });
});

test('writeAgentCertificate refuses an empty node name', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await certDirWithCA(h);
  const outDir = join(certDir, 'out');
  await mkdir(outDir);
  await assert.rejects(writeAgentCertificate({ certDir, nodeName: '', outDir }), {
    name: 'TypeError',
    message: 'a node name is required for an agent certificate',
  });
  await assert.rejects(stat(join(outDir, 'tls.crt')), { code: 'ENOENT' });
});

test('writeAgentCertificate with a CA but a lost ca.key names the missing key', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await certDirWithCA(h);
  await unlink(join(certDir, CA_KEY_FILE));
  await assert.rejects(writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir: join(certDir, 'out') }), {
    name: 'ConfigError',
    code: 'YT_ERR_CERT_DIR',
    message:
      `${join(certDir, CA_KEY_FILE)} is missing but its pair exists; ` +
      `remove ${join(certDir, CA_CERT_FILE)} and ${join(certDir, CA_KEY_FILE)} to have them created again`,
  });
});
