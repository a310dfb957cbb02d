import assert from 'node:assert/strict';
import { test } from 'node:test';
import { X509Certificate } from 'node:crypto';
import { readlink, writeFile, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import {
  CertificateManager,
  rotationDeadline,
  templateMismatch,
  type CertificateSource,
  type CertificateTemplate,
  type KeyUsage,
} from '../../pkg/certs/certificate-manager.js';
import { PemFileStore } from '../../pkg/certs/pem-file-store.js';
import { signRequest } from '../../pkg/certs/pki.js';
import { describeCertificate } from '../../pkg/certs/read-certificate.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { testPKI } from '../support/pki.js';
import { tempDir, waitFor } from '../support/tunnel.js';

/** A signer over the test CA, as the cluster's would be: it keeps the request's names and sets the lifetime. */
class LocalSigner implements CertificateSource {
  readonly description = 'the test CA';
  requests: { csr: string; signerName: string; usages: KeyUsage[] }[] = [];
  failNext = 0;
  /** While set, sign() waits until release() (a CSR nobody approves yet). */
  private held: (() => void)[] | undefined;

  constructor(private readonly lifetimeMs = 60 * 60_000) {}

  hold(): void {
    this.held = [];
  }

  release(): void {
    const waiting = this.held ?? [];
    this.held = undefined;
    for (const go of waiting) go();
  }

  async sign(req: { csr: string; signerName: string; usages: KeyUsage[] }, signal?: AbortSignal): Promise<string> {
    this.requests.push(req);
    if (this.held !== undefined) {
      await new Promise<void>((resolve, reject) => {
        this.held!.push(resolve);
        signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
      });
    }
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('signer unavailable (test)');
    }
    const usages = req.usages.includes('server auth') ? (['serverAuth'] as const) : (['clientAuth'] as const);
    return signRequest(testPKI().ca, req.csr, { usages, lifetimeMs: this.lifetimeMs });
  }
}

function template(over: Partial<CertificateTemplate> = {}): CertificateTemplate {
  return {
    commonName: 'system:node:tunnel-server',
    organizations: ['system:nodes'],
    dnsNames: ['x-tunnel-server-svc', 'tunnel.example'],
    ips: ['127.0.0.1', '::1'],
    signerName: 'kubernetes.io/kubelet-serving',
    usages: ['digital signature', 'key encipherment', 'server auth'],
    ...over,
  };
}

function manager(dir: string, signer: CertificateSource, want: () => CertificateTemplate, log = new MemoryLogger()): CertificateManager {
  return new CertificateManager({
    name: 'yurttunnel-server',
    store: new PemFileStore(dir, 'yurttunnel-server'),
    source: signer,
    template: want,
    backoff: { initialMs: 20, factor: 2, jitter: 0, capMs: 100 },
    logger: log,
  });
}

test('the renewal point lies between 70 % and 90 % of the lifetime', () => {
  const from = new Date('2026-01-01T00:00:00Z');
  const to = new Date('2026-01-11T00:00:00Z');
  assert.equal(rotationDeadline(from, to, () => 0).toISOString(), '2026-01-08T00:00:00.000Z');
  assert.equal(rotationDeadline(from, to, () => 0.999999).getTime() <= new Date('2026-01-10T00:00:00Z').getTime(), true);
  assert.equal(rotationDeadline(from, to, () => 0.5).toISOString(), '2026-01-09T00:00:00.000Z');
});

test('a certificate matches its template by names and addresses as sets, in any IPv6 spelling', () => {
  const have = {
    commonName: 'a',
    organizations: ['o'],
    dnsNames: ['x', 'y'],
    ips: ['0:0:0:0:0:0:0:1', '10.0.0.1'],
    notBefore: new Date(),
    notAfter: new Date(),
  };
  const want = template({ commonName: 'a', organizations: ['o'], dnsNames: ['y', 'x'], ips: ['10.0.0.1', '::1'] });
  assert.equal(templateMismatch(have, want), undefined);
  assert.match(templateMismatch(have, { ...want, ips: ['10.0.0.1'] }) ?? '', /IP addresses/);
  assert.match(templateMismatch(have, { ...want, dnsNames: ['x'] }) ?? '', /DNS names/);
  assert.match(templateMismatch(have, { ...want, commonName: 'b' }) ?? '', /common name/);
});

test('with no stored certificate one is requested, stored under its own prefix, and loaded again on the next start', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const signer = new LocalSigner();
  const first = manager(dir, signer, () => template());
  h.defer(() => first.stop());
  await first.start();
  const pair = await first.ready();
  assert.equal(signer.requests.length, 1);
  assert.equal(signer.requests[0]!.signerName, 'kubernetes.io/kubelet-serving');
  const names = describeCertificate(pair.cert);
  assert.deepEqual(names.dnsNames, ['x-tunnel-server-svc', 'tunnel.example']);
  assert.deepEqual(names.organizations, ['system:nodes']);
  assert.equal(new X509Certificate(pair.cert).checkPrivateKey((await import('node:crypto')).createPrivateKey(pair.key)), true);
  assert.match(await readlink(join(dir, 'yurttunnel-server-current.pem')), /^yurttunnel-server-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.pem$/);
  await first.stop();

  const second = manager(dir, signer, () => template());
  h.defer(() => second.stop());
  await second.start();
  const fingerprint = (pem: string): string => new X509Certificate(pem).fingerprint256;
  assert.equal(fingerprint(second.current()!.cert), fingerprint(pair.cert), 'the stored certificate is used without a new request');
  assert.equal(signer.requests.length, 1);
});

test('an unreadable stored certificate is reported with its path and replaced through a new request', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  await writeFile(join(dir, 'yurttunnel-server-current.pem'), '-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n');
  const log = new MemoryLogger();
  const signer = new LocalSigner();
  const m = manager(dir, signer, () => template(), log);
  h.defer(() => m.stop());
  await m.start();
  await m.ready();
  const warning = log.records.find((r) => r.message.includes('stored certificate is unusable'));
  assert.ok(warning, 'a warning names the file');
  assert.equal(warning.fields.path, join(dir, 'yurttunnel-server-current.pem'));
  assert.equal(signer.requests.length, 1);
});

test('a change of the wanted names renews at once, and listeners get the new certificate', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const signer = new LocalSigner();
  let ips = ['127.0.0.1'];
  const m = manager(dir, signer, () => template({ ips }));
  h.defer(() => m.stop());
  const rotated: string[] = [];
  m.onRotated((pair) => rotated.push(pair.cert));
  await m.start();
  await m.ready();
  m.check('nothing changed');
  assert.equal(signer.requests.length, 1, 'an unchanged template does not renew');
  ips = ['127.0.0.1', '10.96.0.7'];
  m.check('tunnel Services changed');
  await waitFor('the renewed certificate', () => rotated.length === 2);
  assert.deepEqual(describeCertificate(m.current()!.cert).ips, ['127.0.0.1', '10.96.0.7']);
  assert.equal(rotated[1], m.current()!.cert);
  assert.equal((await readdir(dir)).filter((f) => f.endsWith('.pem') && !f.includes('current')).length >= 1, true);
});

test('a certificate is renewed by itself at 70-90 % of a short lifetime', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const signer = new LocalSigner(1500);
  const m = manager(dir, signer, () => template());
  h.defer(() => m.stop());
  await m.start();
  const first = await m.ready();
  const deadline = m.rotationDeadline()!.getTime();
  const { notBefore, notAfter } = describeCertificate(first.cert);
  // X.509 times have whole seconds, so the lifetime as written is 1 or 2 s.
  const lifetime = notAfter.getTime() - notBefore.getTime();
  const offset = deadline - notBefore.getTime();
  assert.ok(offset >= 0.7 * lifetime && offset <= 0.9 * lifetime, `deadline ${offset} ms into a ${lifetime} ms lifetime`);
  await waitFor('a renewal by lifetime', () => signer.requests.length >= 2 && m.current()!.cert !== first.cert, 10_000);
});

test('a failing signer is retried with backoff; stop() while a request waits for approval ends it and leaves nothing running', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const log = new MemoryLogger();
  const signer = new LocalSigner();
  signer.failNext = 2;
  const m = manager(dir, signer, () => template(), log);
  await m.start();
  // The retries wait on unref'd timers: the test keeps itself alive while it waits.
  await waitFor('a certificate after two failed requests', () => m.current() !== undefined, 10_000);
  assert.equal(signer.requests.length, 3);
  assert.equal(log.records.filter((r) => r.message.includes('could not obtain a certificate; retrying')).length, 2);
  await m.stop();

  const pendingDir = await tempDir(h);
  const pendingSigner = new LocalSigner();
  pendingSigner.hold();
  const pending = manager(pendingDir, pendingSigner, () => template());
  await pending.start();
  const ready = pending.ready();
  await waitFor('the request to be sent', () => pendingSigner.requests.length === 1);
  await pending.stop();
  await assert.rejects(ready, /stopped before one was issued/);
});

test('a certificate that cannot be written is used from memory and its write retried: one request, not one per retry', async (t) => {
  const h = harness(t);
  const base = await tempDir(h);
  // A file where the folder should be: every write fails (ENOTDIR), for root too, unlike a read-only mode.
  const blocker = join(base, 'pki');
  await writeFile(blocker, 'not a folder');
  const dir = join(blocker, 'certs');
  const log = new MemoryLogger();
  const signer = new LocalSigner();
  let names = ['x-tunnel-server-svc'];
  const m = manager(dir, signer, () => template({ dnsNames: names }), log);
  h.defer(() => m.stop());
  await m.start();
  await m.ready();
  const failed = (): number => log.records.filter((r) => r.message.includes('could not store the issued certificate')).length;
  await waitFor('three failed writes', () => failed() >= 3, 10_000);
  assert.equal(signer.requests.length, 1, 'no new CSR for a failed write');
  const record = log.records.find((r) => r.message.includes('could not store the issued certificate'))!;
  assert.equal(record.fields.dir, dir);

  // A write that keeps failing does not hold up a renewal.
  names = ['x-tunnel-server-svc', 'tunnel.example'];
  m.check('test');
  await waitFor('the renewed names in use', () => m.current() !== undefined && describeCertificate(m.current()!.cert).dnsNames.length === 2, 10_000);
  assert.equal(signer.requests.length, 2);
  const pair = m.current()!;

  await rm(blocker);
  await waitFor('the certificate written once the folder can be made', () => log.records.some((r) => r.message === 'certificate stored'), 10_000);
  assert.equal(signer.requests.length, 2);
  const stored = await new PemFileStore(dir, 'yurttunnel-server').load();
  if (stored.kind !== 'found') assert.fail(`the certificate was not stored: ${JSON.stringify(stored)}`);
  const fingerprint = (pem: string): string => new X509Certificate(pem).fingerprint256;
  assert.equal(fingerprint(stored.pair.cert), fingerprint(pair.cert));
});
