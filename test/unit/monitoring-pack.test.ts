// The monitoring pack (manifests/monitoring/): its files are what `npm run
// monitoring` derives from hack/monitoring.ts; Debian's promtool accepts the
// rules and the scrape jobs and passes test/monitoring/rules.test.yaml, which
// has a firing case for every alert; the dashboard has the shape Grafana
// loads, and its queries are the ones test/e2e/monitoring.test.ts evaluates;
// the kustomize component builds on the base.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { ALERT_RULES, PANELS, SERVER_JOB, monitoringFiles, scrapeConfigs, toYaml } from '../../hack/monitoring.js';
import { findControlPlane } from '../support/envtest/binaries.js';
import { harness } from '../support/harness.js';
import { PROMTOOL, prometheusSkipReason } from '../support/prometheus.js';
import { tempDir } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';

const run = promisify(execFile);
const PACK = join(repoRoot(), 'manifests/monitoring');
const RULES = join(PACK, 'rules.yaml');
const RULE_TESTS = join(repoRoot(), 'test/monitoring/rules.test.yaml');

test('every derived file of manifests/monitoring/ is what `npm run monitoring` writes now', async () => {
  for (const [name, text] of monitoringFiles()) {
    assert.equal(await readFile(join(PACK, name), 'utf8'), text, `manifests/monitoring/${name} is stale: run npm run monitoring`);
  }
});

test('promtool checks the rules and a Prometheus config made of the scrape jobs', { skip: prometheusSkipReason(['promtool']) }, async (t) => {
  const h = harness(t);
  const rules = await run(PROMTOOL!, ['check', 'rules', RULES]);
  assert.match(rules.stdout, new RegExp(`SUCCESS: ${ALERT_RULES.length + 7} rules found`));
  const dir = await tempDir(h);
  const config = join(dir, 'prometheus.yml');
  // Debian builds Prometheus without Kubernetes discovery: the jobs are checked with a static target instead, relabelling and all.
  const jobs = scrapeConfigs().map((job) => {
    const { kubernetes_sd_configs: sd, ...rest } = job as { kubernetes_sd_configs: unknown };
    assert.ok(sd !== undefined);
    return { ...rest, static_configs: [{ targets: ['edge-1:10266'] }] };
  });
  await writeFile(config, toYaml({ rule_files: [RULES], scrape_configs: jobs }));
  const checked = await run(PROMTOOL!, ['check', 'config', config]);
  assert.match(checked.stdout, /SUCCESS/);
});

test('promtool test rules passes, and every alert has a case where it fires', { skip: prometheusSkipReason(['promtool']) }, async () => {
  const tests = await readFile(RULE_TESTS, 'utf8');
  for (const a of ALERT_RULES) {
    assert.match(tests, new RegExp(`alertname: ${a.alert}\\n *exp_alerts:\\n *- exp_labels:`), `no firing case for ${a.alert}`);
  }
  const r = await run(PROMTOOL!, ['test', 'rules', RULE_TESTS]);
  assert.match(r.stdout + r.stderr, /SUCCESS/);
});

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource: { type: string; uid: string };
  gridPos: { h: number; w: number; x: number; y: number };
  targets: Array<{ refId: string; expr: string; datasource: { uid: string } }>;
}

test('the dashboard has the shape Grafana loads, a data source variable, and only the panels the e2e test evaluates', async () => {
  const d = JSON.parse(await readFile(join(PACK, 'dashboard.json'), 'utf8')) as {
    uid: string;
    title: string;
    schemaVersion: number;
    templating: { list: Array<{ name: string; type: string; query: string }> };
    panels: Panel[];
  };
  assert.equal(typeof d.uid, 'string');
  assert.equal(typeof d.title, 'string');
  assert.ok(Number.isInteger(d.schemaVersion) && d.schemaVersion >= 36, `schemaVersion ${d.schemaVersion}`);
  assert.deepEqual(
    d.templating.list.filter((v) => v.type === 'datasource').map((v) => [v.name, v.query]),
    [['datasource', 'prometheus']],
  );
  assert.equal(new Set(d.panels.map((p) => p.id)).size, d.panels.length, 'panel ids are unique');
  const exprs: string[] = [];
  for (const p of d.panels) {
    assert.equal(p.type, 'timeseries');
    assert.deepEqual(p.datasource, { type: 'prometheus', uid: '${datasource}' }, p.title);
    assert.ok(p.gridPos.w > 0 && p.gridPos.h > 0 && p.gridPos.x + p.gridPos.w <= 24, p.title);
    assert.ok(p.targets.length > 0, `${p.title} has queries`);
    assert.equal(new Set(p.targets.map((t) => t.refId)).size, p.targets.length, `${p.title}: refIds are unique`);
    for (const t of p.targets) {
      assert.equal(t.datasource.uid, '${datasource}');
      // Grafana's own variables ($__rate_interval, …) Prometheus cannot evaluate: none, so the e2e test runs each as it is.
      assert.doesNotMatch(t.expr, /\$/, `${p.title}: ${t.expr}`);
      exprs.push(t.expr);
    }
  }
  assert.deepEqual(
    exprs,
    PANELS.flatMap((p) => p.targets.map((t) => t.expr)),
  );
  // The dashboard covers what the issue asks for.
  for (const title of [
    'Tunnelled connections',
    'Bytes through the tunnel',
    'Dial latency',
    'Dial failures by reason',
    'Agents per server replica',
    'Session resumes',
    'Memory (resident)',
    'CPU',
  ]) {
    assert.ok(
      d.panels.some((p) => p.title === title),
      title,
    );
  }
});

const controlPlane = findControlPlane();

test(
  'the kustomize component adds the rules, the PodMonitors and the dashboard, and moves the server’s meta port to the pod’s IP',
  { skip: 'missing' in controlPlane ? controlPlane.missing : undefined },
  async (t) => {
    if ('missing' in controlPlane) return;
    const h = harness(t);
    const dir = await tempDir(h);
    const manifests = join(repoRoot(), 'manifests');
    await writeFile(
      join(dir, 'kustomization.yaml'),
      `apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ${relative(dir, join(manifests, 'base'))}\n` +
        `components:\n- ${relative(dir, join(manifests, 'monitoring'))}\n`,
    );
    const { stdout } = await run(controlPlane.kubectl, ['kustomize', dir], { maxBuffer: 16 * 1024 * 1024 });
    const docs = stdout.split(/^---$/m);
    const kinds = docs.map((d) => /^kind: (\S+)$/m.exec(d)?.[1]);
    assert.equal(kinds.filter((k) => k === 'PrometheusRule').length, 1);
    assert.equal(kinds.filter((k) => k === 'PodMonitor').length, 2);
    const dashboard = docs.find((d) => /name: yurt-tunnel-dashboard/.test(d));
    assert.match(dashboard ?? '', /grafana_dashboard: "1"/);
    const server = docs.find((d) => /^kind: Deployment$/m.test(d) && new RegExp(`name: ${SERVER_JOB}$`, 'm').test(d));
    assert.ok(server !== undefined);
    assert.match(server, /- --meta-bind-address=\$\(POD_IP\)/);
    assert.match(server, /fieldPath: status.podIP/);
    // Its probes follow the meta port to the pod's IP; the agents' stay on loopback.
    assert.doesNotMatch(server, /host: 127\.0\.0\.1/);
    const agents = docs.find((d) => /^kind: DaemonSet$/m.test(d));
    assert.match(agents ?? '', /host: 127\.0\.0\.1/);
  },
);
