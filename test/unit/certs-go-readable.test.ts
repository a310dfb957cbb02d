// Certificates Go can read. Go's crypto/x509 refuses a name attribute written
// as PrintableString that holds a character PrintableString may not ('@', '_',
// '*', anything non-ASCII); node-forge writes every attribute as
// PrintableString unless told otherwise, and our CA's name has an '@'. Names
// are now written as Go and OpenSSL write them, an old CA left in --cert-dir is
// replaced, and the real Go agent proves it can load the result.

import assert from 'node:assert/strict';
import { X509Certificate, generateKeyPairSync } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import forge from 'node-forge';
import { CA_CERT_FILE, CA_KEY_FILE, ensureLocalServerCertificates, writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { createCA, issueCertificate, serialNumber, type CertKeyPair } from '../../pkg/certs/pki.js';
import { invalidPrintableStrings } from '../../pkg/certs/read-certificate.js';
import { harness } from '../support/harness.js';
import { findKonnectivity } from '../../hack/konnectivity.js';
import { startProcess } from '../support/processes.js';
import { closedPort, tempDir } from '../support/tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

const LIMIT = { timeout: 30_000 };

/** The ASN.1 string type of each name attribute, as "CN:UTF8" etc. */
function nameTypes(pem: string, which: 'subject' | 'issuer'): string[] {
  const cert = forge.pki.certificateFromPem(pem);
  return cert[which].attributes.map((a) => {
    const tag = (a as { valueTagClass?: number }).valueTagClass;
    return `${a.shortName}:${tag === forge.asn1.Type.UTF8 ? 'UTF8' : tag === forge.asn1.Type.PRINTABLESTRING ? 'Printable' : String(tag)}`;
  });
}

/** A CA as versions before this fix wrote it: every attribute a PrintableString. */
function oldStyleCA(commonName: string, more: forge.pki.CertificateField[] = []): CertKeyPair {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs1', format: 'pem' }).toString();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicKey.export({ type: 'spki', format: 'pem' }).toString());
  cert.serialNumber = '01';
  cert.validity.notBefore = new Date(Date.now() - 60_000);
  cert.validity.notAfter = new Date(Date.now() + 86_400_000);
  cert.setSubject([...more, { name: 'commonName', value: commonName }]);
  cert.setIssuer([{ name: 'commonName', value: commonName }]);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, critical: true },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(keyPem), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: keyPem };
}

test('a name that PrintableString cannot hold is a UTF8String; one it can is a PrintableString', LIMIT, () => {
  const ca = createCA('yurt-tunnel-local-ca@1700000000');
  assert.deepEqual(nameTypes(ca.cert, 'subject'), ['CN:UTF8']);
  const leaf = issueCertificate(ca, { commonName: 'system:node:edge_1', organizations: ['openyurt:yurttunnel'], usages: ['clientAuth'] });
  assert.deepEqual(nameTypes(leaf.cert, 'subject'), ['O:Printable', 'CN:UTF8']);
  assert.deepEqual(nameTypes(leaf.cert, 'issuer'), ['CN:UTF8']);
  assert.deepEqual(invalidPrintableStrings(ca.cert), []);
  assert.deepEqual(invalidPrintableStrings(leaf.cert), []);
  assert.deepEqual(invalidPrintableStrings(oldStyleCA('yurt-tunnel-local-ca@1').cert), [
    'subject CN=yurt-tunnel-local-ca@1',
    'issuer CN=yurt-tunnel-local-ca@1',
  ]);
});

test('every name attribute is checked, in the order written, with its short name or else its OID', LIMIT, () => {
  const more = [
    { name: 'countryName', value: 'DE' },
    { name: 'organizationName', value: 'edge_nodes' },
    { shortName: 'OU', value: 'fine' },
    { type: '2.5.4.5', value: 'a*b' },
  ];
  assert.deepEqual(invalidPrintableStrings(oldStyleCA('ca@2', more).cert), [
    'subject O=edge_nodes',
    'subject 2.5.4.5=a*b',
    'subject CN=ca@2',
    'issuer CN=ca@2',
  ]);
});

test('a non-ASCII CA name is written once as UTF-8, and its leaves chain to it byte for byte', LIMIT, () => {
  const ca = createCA('Zürich edge CA');
  const leaf = issueCertificate(ca, { commonName: 'tunnel-agent-client', usages: ['clientAuth'] });
  assert.equal(new X509Certificate(ca.cert).subject, 'CN=Zürich edge CA');
  assert.equal(new X509Certificate(leaf.cert).checkIssued(new X509Certificate(ca.cert)), true);
  assert.equal(new X509Certificate(leaf.cert).verify(new X509Certificate(ca.cert).publicKey), true);
});

test('a CA an older version left in --cert-dir is replaced with everything it issued; issue-agent-cert refuses it until then', LIMIT, async (t) => {
  const h = harness(t);
  const certDir = await tempDir(h);
  const old = oldStyleCA('yurt-tunnel-local-ca@1600000000');
  await writeFile(join(certDir, CA_CERT_FILE), old.cert);
  await writeFile(join(certDir, CA_KEY_FILE), old.key, { mode: 0o600 });
  await assert.rejects(writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir: join(certDir, 'agent') }), {
    message: new RegExp(`^the CA in ${join(certDir, CA_CERT_FILE)} was written by an older version: .*Start yurt-tunnel-server`),
  });

  const got = await ensureLocalServerCertificates({ certDir });
  assert.match(got.caReplacedBecause ?? '', /PrintableString holding characters it may not \(subject CN=yurt-tunnel-local-ca@1600000000; /);
  assert.notEqual(got.ca, old.cert);
  assert.deepEqual(invalidPrintableStrings(got.ca), []);
  assert.deepEqual(got.changed, [CA_CERT_FILE, 'tunnel-server.crt', 'tunnel-proxy-client.crt']);
  assert.equal(new X509Certificate(got.server.cert).checkIssued(new X509Certificate(got.ca)), true);

  const again = await ensureLocalServerCertificates({ certDir });
  assert.equal(again.caReplacedBecause, undefined);
  assert.deepEqual(again.changed, []);
  await writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir: join(certDir, 'agent') });
});

const konnectivity = findKonnectivity();

test('every serial number is a minimal, positive DER INTEGER (Go refuses a leading zero byte as malformed)', LIMIT, () => {
  // Drawn as our certificates draw it: with a leading zero byte 1 time in 128, 10,000 draws all but surely meet one.
  for (let i = 0; i < 10_000; i++) {
    const first = Number.parseInt(serialNumber().slice(0, 2), 16);
    assert.ok(first !== 0 && first < 0x80, `serial number starting with byte 0x${first.toString(16)}`);
  }
  // And as written into an issued certificate: the INTEGER's content, read back from the DER.
  const ca = createCA('serials');
  const leaf = issueCertificate(ca, { commonName: 'leaf', usages: ['serverAuth'] });
  const der = forge.asn1.fromDer(forge.pki.pemToDer(leaf.cert));
  const tbs = (der.value as forge.asn1.Asn1[])[0]!.value as forge.asn1.Asn1[];
  const serial = tbs.find((n) => n.type === forge.asn1.Type.INTEGER && n.tagClass === forge.asn1.Class.UNIVERSAL)!;
  const firstByte = (serial.value as string).charCodeAt(0);
  assert.ok(firstByte !== 0 && firstByte < 0x80, `issued serial starting with byte 0x${firstByte.toString(16)}`);
});

test('the real Go agent loads our CA, and refuses an old-style one', { ...LIMIT, skip: typeof konnectivity === 'string' ? konnectivity : false }, async (t) => {
  if (typeof konnectivity === 'string') return;
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  await ensureLocalServerCertificates({ certDir });
  const agent = await writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir: join(dir, 'agent') });
  const oldCA = join(dir, 'old-ca.crt');
  await writeFile(oldCA, oldStyleCA('yurt-tunnel-local-ca@1600000000').cert);
  const [port, healthPort, adminPort] = [await closedPort(), await freeLowPort(), await freeLowPort()];
  const run = (caFile: string): ReturnType<typeof startProcess> =>
    startProcess(
      h,
      konnectivity.proxyAgent,
      [
        '--proxy-server-host=127.0.0.1',
        `--proxy-server-port=${port}`,
        `--ca-cert=${caFile}`,
        `--agent-cert=${agent.certFile}`,
        `--agent-key=${agent.keyFile}`,
        '--agent-id=edge-1',
        '--health-server-host=127.0.0.1',
        `--health-server-port=${healthPort}`,
        `--admin-server-port=${adminPort}`,
      ],
      {},
      { node: false },
    );
  const refused = run(oldCA);
  await refused.waitForLine(/failed to append CA cert to the cert pool/);
  // With our CA it gets as far as dialling (nothing listens there) and keeps trying.
  const loaded = run(agent.caFile);
  await loaded.waitForLine(/cannot connect once.*connection refused/);
  assert.equal(
    loaded.lines.some((l) => l.includes('failed to append CA cert')),
    false,
    loaded.lines.join('\n'),
  );
});
