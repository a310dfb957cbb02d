// The metrics the monitoring pack's alerts read that are computed at scrape
// time: each certificate's notAfter by role (following a rotation), and the
// process's CPU and memory under the names every Prometheus client uses.

import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { test } from 'node:test';
import { createCA } from '../../pkg/certs/pki.js';
import { watchCertificateExpiry } from '../../pkg/metrics/certificate-expiry.js';
import { watchProcess } from '../../pkg/metrics/process-metrics.js';
import { Registry } from '../../pkg/metrics/prom.js';

async function values(registry: Registry, name: string): Promise<Array<{ labels: Record<string, unknown>; value: number }>> {
  return (await registry.getSingleMetric(name)!.get()).values.map((v) => ({ labels: { ...v.labels }, value: v.value }));
}

test('the certificate expiry gauge reports each role’s notAfter, follows a new certificate and leaves out a missing one', async () => {
  const registry = new Registry();
  const shortLived = createCA('short', 3);
  const longLived = createCA('long', 400);
  let serving: string | undefined = shortLived.cert;
  let proxyClient: string | undefined;
  watchCertificateExpiry(registry, { serving: () => serving, proxy_client: () => proxyClient });
  const notAfter = (pem: string): number => Date.parse(new X509Certificate(pem).validTo) / 1000;

  assert.deepEqual(await values(registry, 'yurttunnel_certificate_expiry_timestamp_seconds'), [
    { labels: { role: 'serving' }, value: notAfter(shortLived.cert) },
  ]);
  const days = (notAfter(shortLived.cert) - Date.now() / 1000) / 86400;
  assert.ok(days > 2.9 && days <= 3, `${days} days left`);

  serving = longLived.cert;
  proxyClient = shortLived.cert;
  assert.deepEqual(await values(registry, 'yurttunnel_certificate_expiry_timestamp_seconds'), [
    { labels: { role: 'serving' }, value: notAfter(longLived.cert) },
    { labels: { role: 'proxy_client' }, value: notAfter(shortLived.cert) },
  ]);

  serving = 'not a certificate';
  assert.deepEqual(await values(registry, 'yurttunnel_certificate_expiry_timestamp_seconds'), [
    { labels: { role: 'proxy_client' }, value: notAfter(shortLived.cert) },
  ]);
});

test('the process metrics count CPU time up and report resident memory', async () => {
  const registry = new Registry();
  watchProcess(registry);
  const cpu = async (): Promise<number> => (await values(registry, 'process_cpu_seconds_total'))[0]!.value;
  const used = (): number => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  };
  const first = await cpu();
  const start = used();
  // Burn 30 ms of CPU (the machine is shared: bounded by 5 s of wall time).
  for (const until = performance.now() + 5000; used() - start < 0.03 && performance.now() < until;);
  const burnt = used() - start;
  const second = await cpu();
  assert.ok(burnt >= 0.03, `${burnt} s of CPU burnt`);
  assert.ok(second - first >= burnt, `${second - first} s of CPU counted, ${burnt} s burnt`);
  const rss = (await values(registry, 'process_resident_memory_bytes'))[0]!.value;
  assert.ok(rss > 10 * 1024 * 1024 && rss === Math.round(rss), `rss ${rss}`);
  const started = (await values(registry, 'process_start_time_seconds'))[0]!.value;
  assert.ok(Math.abs(started - (Date.now() / 1000 - process.uptime())) < 2);
});
