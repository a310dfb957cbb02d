// The DNS record controller against a real kube-apiserver: the hosts records
// in kube-system/yurt-tunnel-nodes follow node add, delete, label and address
// changes within a second of the watch event, by exact name; the internal
// Service's dnat-<port> ports follow the server ConfigMap, its deletion
// included; of two replicas only the Lease holder writes, one that loses its
// API server steps down (and lives on), and the other takes over within the
// lease time.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { after, before, describe, test } from 'node:test';
import { DNS_CONTROLLER_LEASE, DnsController } from '../../pkg/dns/controller.js';
import { createKubeClient, type KubeClient } from '../../pkg/kube/client.js';
import { configMapInformer } from '../../pkg/kube/config-map-informer.js';
import { Informer } from '../../pkg/kube/informer.js';
import { nodeInformer } from '../../pkg/kube/node-resolver.js';
import { ServerConfigSource } from '../../pkg/kube/server-config-source.js';
import type { V1Node, V1Service } from '../../pkg/kube/types.js';
import { controlPlaneSkipReason, deleteObject, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { kubeconfigYAML } from '../support/envtest/pki.js';
import { harness, suiteHarness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const skip = controlPlaneSkipReason();

const MASTER = { secure: 10263, insecure: 10264 };

interface Replica {
  dns: DnsController;
  log: MemoryLogger;
  nodes: Informer<V1Node>;
  /** When this replica's node informer saw each event, by node. */
  nodeEvents: Map<string, number[]>;
}

/** One server's worth of what the controller runs on: a client, the shared informers, the server ConfigMap source. */
async function startReplica(
  h: Harness,
  kubeconfig: string,
  name: string,
  lease?: { durationMs: number; renewDeadlineMs: number; retryPeriodMs: number },
): Promise<Replica> {
  const client: KubeClient = createKubeClient({ kind: 'kubeconfig', path: kubeconfig });
  const log = new MemoryLogger(2);
  const nodes = nodeInformer(client, log);
  const services = new Informer<V1Service>({
    name: 'kube-system/services',
    list: (o) => client.core.listNamespacedService({ namespace: 'kube-system', ...o }),
    watchPath: '/api/v1/namespaces/kube-system/services',
    labelSelector: 'name=yurt-tunnel-server',
    watch: client.watch,
    logger: log,
  });
  const config = new ServerConfigSource(client, { insecurePort: MASTER.insecure, localhostProxyPorts: [], logger: log });
  const nodeEvents = new Map<string, number[]>();
  const stamp = (n: V1Node): void => {
    const name = n.metadata!.name!;
    nodeEvents.set(name, [...(nodeEvents.get(name) ?? []), performance.now()]);
  };
  nodes.addHandler({ add: stamp, update: (_o, n) => stamp(n), delete: stamp });
  const dns = new DnsController({
    client,
    nodes,
    services,
    proxyPorts: config,
    masterPorts: MASTER,
    identity: name,
    fieldManager: name,
    ...(lease !== undefined ? { lease } : {}),
    logger: log,
  });
  nodes.start();
  services.start();
  config.start();
  dns.start();
  h.defer(async () => {
    await dns.stop();
    await Promise.all([nodes.stop(), services.stop(), config.stop()]);
  });
  return { dns, log, nodes, nodeEvents };
}

/** Every version of the records the API server announces, with when the test saw it. */
function watchRecords(h: Harness, client: KubeClient): { versions: { at: number; text: string | undefined }[]; latest(): string | undefined } {
  const versions: { at: number; text: string | undefined }[] = [];
  const informer = configMapInformer(client, 'kube-system', 'yurt-tunnel-nodes', new MemoryLogger(0));
  const seen = (text: string | undefined): void => void versions.push({ at: performance.now(), text });
  informer.addHandler({ add: (cm) => seen(cm.data?.['tunnel-nodes']), update: (_o, cm) => seen(cm.data?.['tunnel-nodes']), delete: () => seen(undefined) });
  informer.start();
  h.defer(() => informer.stop());
  return { versions, latest: () => versions[versions.length - 1]?.text };
}

/**
 * A TCP relay to the API server that can be cut: cut() makes it a black hole
 * (connections held open, nothing forwarded: an API server that stopped
 * answering), heal() resets what it held and forwards again.
 */
async function cuttableRelay(h: Harness, targetPort: number): Promise<{ port: number; cut(): void; heal(): void }> {
  let cut = false;
  const held = new Set<Socket>();
  const server = createServer((client) => {
    client.on('error', () => {});
    held.add(client);
    client.on('close', () => held.delete(client));
    if (cut) return;
    const upstream = connect(targetPort, '127.0.0.1');
    upstream.on('error', () => client.destroy());
    held.add(upstream);
    upstream.on('close', () => (held.delete(upstream), cut || client.destroy()));
    client.on('close', () => cut || upstream.destroy());
    client.on('data', (d: Buffer) => cut || upstream.write(d));
    upstream.on('data', (d: Buffer) => cut || client.write(d));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const reset = (): void => {
    for (const s of held) s.destroy();
    held.clear();
  };
  h.defer(async () => {
    reset();
    await new Promise((r) => server.close(r));
  });
  return {
    port: (server.address() as { port: number }).port,
    cut: () => void (cut = true),
    heal: () => {
      cut = false;
      reset();
    },
  };
}

async function managers(cp: ControlPlane, kind: string, name: string): Promise<string[]> {
  const r = await cp.kubectl(['get', kind, name, '-n', 'kube-system', '-o', 'json', '--show-managed-fields']);
  assert.equal(r.code, 0, r.stderr);
  const obj = JSON.parse(r.stdout) as { metadata: { managedFields?: { manager: string }[] } };
  return (obj.metadata.managedFields ?? []).map((f) => f.manager);
}

describe('DNS record controller with a real kube-apiserver', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let admin: KubeClient;
  let clusterIP: string;

  before(async () => {
    cp = await startControlPlane();
    suite.defer(() => cp.stop());
    admin = createKubeClient({ kind: 'kubeconfig', path: cp.adminKubeconfig });
    await cp.apply({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'x-tunnel-server-internal-svc', namespace: 'kube-system', labels: { name: 'yurt-tunnel-server' } },
      spec: {
        type: 'ClusterIP',
        selector: { 'k8s-app': 'yurt-tunnel-server' },
        ports: [
          { name: 'https', port: 10250, targetPort: 10263 },
          { name: 'http', port: 10255, targetPort: 10264 },
        ],
      },
    });
    clusterIP = (await cp.kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-internal-svc', '-o', 'jsonpath={.spec.clusterIP}'])).stdout;
    assert.match(clusterIP, /^10\./);
  });
  after(() => suite.close());

  test('records follow node add, address, label and delete within a second of the watch event; n1 never touches edge-n1', async (t) => {
    const h = harness(t, { leakCheck: false });
    const a = await startReplica(h, cp.adminKubeconfig, 'dns-a');
    const records = watchRecords(h, admin);
    await waitFor('the records ConfigMap to be created', () => records.versions.length > 0, 20_000);
    // The watch can show the ConfigMap before the controller's create call has returned and logged.
    await waitFor('the controller to log its create', () => a.log.find('DNS records ConfigMap created').length > 0, 5000);
    assert.equal(a.log.find('DNS records ConfigMap created').length, 1);

    /** Runs `change`, waits for the records to read `expected`, and measures from the node's watch event that made them. */
    const expectRecords = async (node: string, expected: string[], change: () => Promise<unknown>): Promise<void> => {
      const text = expected.join('\n');
      const since = performance.now();
      await change();
      await waitFor(`records ${JSON.stringify(text)}`, () => records.latest() === text, 10_000);
      const written = records.versions.find((v) => v.text === text && v.at >= since)!;
      const event = Math.max(...(a.nodeEvents.get(node) ?? []).filter((at) => at >= since && at <= written.at));
      const lag = written.at - event;
      assert.ok(lag >= 0 && lag < 1000, `records for ${node} changed ${Math.round(lag)} ms after its watch event`);
      lags.push(Math.round(lag));
    };
    const lags: number[] = [];
    const edge = `${clusterIP}\tedge-n1`;
    await expectRecords('edge-n1', [edge], () =>
      putNode(cp, 'edge-n1', { internalIP: '192.168.1.5', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } }),
    );
    await expectRecords('n1', [`10.0.0.1\tn1`, edge], () =>
      putNode(cp, 'n1', { internalIP: '10.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'false' } }),
    );
    // A new address: OpenYurt waits for its resync (30 minutes); here it is the next event.
    await expectRecords('n1', [`10.0.0.2\tn1`, edge], () =>
      putNode(cp, 'n1', { internalIP: '10.0.0.2', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'false' } }),
    );
    // n1 becomes an edge node: it resolves to the tunnel too.
    await expectRecords('n1', [`${clusterIP}\tedge-n1`, `${clusterIP}\tn1`].sort(), () =>
      cp.kubectl(['label', 'node', 'n1', 'openyurt.io/is-edge-worker=true', '--overwrite']),
    );
    await expectRecords('n1', [edge], () => deleteObject(cp, 'node', 'n1'));
    t.diagnostic(`records written ${lags.join(', ')} ms after the watch events`);
    // Whatever n1 went through, edge-n1's record never changed or went away once written.
    const first = records.versions.findIndex((v) => v.text?.includes('edge-n1'));
    for (const v of records.versions.slice(first)) assert.ok(v.text!.split('\n').includes(edge), `edge-n1 kept in ${JSON.stringify(v.text)}`);

    // A node with no address is skipped with one warning; the others stay.
    await cp.apply({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'bare' } });
    await waitFor('the warning for bare', () => a.log.find('node bare gets no DNS record').length > 0, 10_000);
    assert.equal(
      a.log.find('node bare gets no DNS record')[0]!.message,
      'node bare gets no DNS record: it has neither an InternalIP nor an ExternalIP address',
    );
    assert.equal(records.latest(), edge);
    await deleteObject(cp, 'node', 'bare');

    // Someone else's edit is undone.
    const tampered = await cp.kubectl([
      'patch',
      'cm',
      'yurt-tunnel-nodes',
      '-n',
      'kube-system',
      '--type=merge',
      '-p',
      JSON.stringify({ data: { 'tunnel-nodes': `1.2.3.4\tedge-n1` } }),
    ]);
    assert.equal(tampered.code, 0, tampered.stderr);
    await waitFor('the records to be restored', () => records.latest() === edge && records.versions.some((v) => v.text?.startsWith('1.2.3.4')), 10_000);
  });

  test("the internal Service's dnat ports follow the server ConfigMap; deleting it restores the default ports", async (t) => {
    const h = harness(t, { leakCheck: false });
    await startReplica(h, cp.adminKubeconfig, 'dns-ports');
    const ports = async (): Promise<string> =>
      (
        await cp.kubectl([
          'get',
          'svc',
          '-n',
          'kube-system',
          'x-tunnel-server-internal-svc',
          '-o',
          'jsonpath={range .spec.ports[*]}{.name}={.port}>{.targetPort} {end}',
        ])
      ).stdout.trim();
    const defaults = 'https=10250>10263 http=10255>10264';
    assert.equal(await ports(), defaults);
    await cp.apply({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'yurt-tunnel-server-cfg', namespace: 'kube-system' },
      data: { 'http-proxy-ports': '9100, 9101', 'https-proxy-ports': '9443', 'localhost-proxy-ports': '10266' },
    });
    const wanted = `${defaults} dnat-9100=9100>10264 dnat-9101=9101>10264 dnat-9443=9443>10263`;
    for (let i = 0; i < 100 && (await ports()) !== wanted; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(await ports(), wanted);
    assert.deepEqual(
      [...new Set(await managers(cp, 'svc', 'x-tunnel-server-internal-svc'))].filter((m) => m.startsWith('dns-')),
      ['dns-ports'],
    );

    await cp.apply({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'yurt-tunnel-server-cfg', namespace: 'kube-system' },
      data: { 'https-proxy-ports': '9443,9101' },
    });
    const edited = `${defaults} dnat-9101=9101>10263 dnat-9443=9443>10263`;
    for (let i = 0; i < 100 && (await ports()) !== edited; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(await ports(), edited);

    await deleteObject(cp, 'configmap', 'yurt-tunnel-server-cfg', 'kube-system');
    for (let i = 0; i < 100 && (await ports()) !== defaults; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(await ports(), defaults, 'the dnat ports went away with the ConfigMap');
  });

  test('two replicas: one leader writes; cut off from its API server it steps down and lives on; the other takes over within the lease time', async (t) => {
    const h = harness(t, { leakCheck: false });
    const lease = { durationMs: 3000, renewDeadlineMs: 2000, retryPeriodMs: 500 };
    const relay = await cuttableRelay(h, cp.port);
    const dir = await tempDir(h);
    const relayed = join(dir, 'relayed.kubeconfig');
    await writeFile(relayed, kubeconfigYAML(`https://127.0.0.1:${relay.port}`, cp.pki.ca.cert, cp.pki.admin));
    const a = await startReplica(h, relayed, 'dns-leader-a', lease);
    await waitFor('a to lead', () => a.dns.isLeader(), 20_000);
    const b = await startReplica(h, cp.adminKubeconfig, 'dns-leader-b', lease);
    // Start from a fresh ConfigMap, so that its managedFields name only who writes from now on.
    await deleteObject(cp, 'configmap', 'yurt-tunnel-nodes', 'kube-system');
    const records = watchRecords(h, admin);
    await waitFor('the leader to write the records again', () => records.latest() !== undefined, 20_000);
    await putNode(cp, 'edge-n2', { internalIP: '192.168.1.6', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await waitFor('edge-n2 in the records', () => records.latest()?.includes('edge-n2') === true, 10_000);
    assert.ok(a.dns.isLeader() && !b.dns.isLeader());
    assert.deepEqual([...new Set(await managers(cp, 'cm', 'yurt-tunnel-nodes'))], ['dns-leader-a'], 'only the leader wrote');
    assert.equal(b.log.records.filter((r) => r.message.startsWith('DNS records')).length, 0, 'the follower wrote nothing');

    // a's API server stops answering: a cannot renew, steps down by its renew deadline; b takes over after the lease.
    const cutAt = performance.now();
    relay.cut();
    await waitFor('a to step down', () => !a.dns.isLeader(), 10_000);
    const steppedDown = performance.now() - cutAt;
    await waitFor('b to take over', () => b.dns.isLeader(), 10_000);
    const tookOver = performance.now() - cutAt;
    assert.ok(steppedDown < lease.renewDeadlineMs + lease.retryPeriodMs + 1000, `a stepped down ${Math.round(steppedDown)} ms after the cut`);
    assert.ok(tookOver < lease.durationMs + lease.retryPeriodMs * 2 + 1000, `b took over ${Math.round(tookOver)} ms after the cut`);
    assert.ok(a.log.find('DNS controller paused: not the leader').length >= 1, 'a paused its controller and lives on');
    await putNode(cp, 'edge-n3', { internalIP: '192.168.1.7', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await waitFor('edge-n3 in the records (written by b)', () => records.latest()?.includes('edge-n3') === true, 10_000);
    assert.ok(b.log.find('DNS records updated').length >= 1);
    assert.deepEqual([...new Set(await managers(cp, 'cm', 'yurt-tunnel-nodes'))].sort(), ['dns-leader-a', 'dns-leader-b']);

    // a's API server is back: a stays a follower while b leads, and takes over at once when b stops (b releases the lease).
    relay.heal();
    assert.ok(!a.dns.isLeader());
    await b.dns.stop();
    // b gave the lease up as it stopped (not left to expire): it is no longer b's, whether a has taken it yet or not.
    assert.equal(b.log.find('could not release the lease; the next leader waits for it to expire').length, 0);
    const holder = await cp.kubectl(['get', 'lease', DNS_CONTROLLER_LEASE, '-n', 'kube-system', '-o', 'jsonpath={.spec.holderIdentity}']);
    assert.notEqual(holder.stdout.trim(), 'dns-leader-b', 'b released the lease when it stopped');
    await waitFor('a to lead again', () => a.dns.isLeader(), 10_000);
    await deleteObject(cp, 'node', 'edge-n3');
    await waitFor('edge-n3 gone from the records (written by a)', () => records.latest()?.includes('edge-n3') === false, 20_000);
  });
});
