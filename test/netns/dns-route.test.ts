// OpenYurt's DNS route, end to end, in network namespaces: a real
// kube-apiserver in a "cloud" namespace reaches kubelets by node name
// (--kubelet-preferred-address-types=Hostname); the names resolve through a
// real DNS server in that namespace (dnsmasq serving the records of
// kube-system/yurt-tunnel-nodes as an extra hosts file, as CoreDNS's hosts
// plugin would; the namespace's /etc/netns/<ns>/resolv.conf points at it) to
// the ClusterIP of x-tunnel-server-internal-svc, an address of the cloud
// namespace where the tunnel's master port listens (a forwarder standing in
// for kube-proxy). The records are written by our server's DNS controller;
// our agent and the stand-in kubelet live in an "edge" namespace the cloud
// cannot reach. kubectl logs, logs -f, exec and the node proxy work.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants, existsSync } from 'node:fs';
import { mkdir, rm, rmdir, writeFile } from 'node:fs/promises';
import { delimiter, join } from 'node:path';
import { test } from 'node:test';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { createKubeClient } from '../../pkg/kube/client.js';
import { configMapInformer } from '../../pkg/kube/config-map-informer.js';
import { kubeletKubeconfig } from '../support/cluster.js';
import { autoApprove, controlPlaneSkipReason, putNode, putPod, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { exposePort, NetworkNamespace, NETNS_TOOL, netnsSkipReason, probeTCP, vethPair } from '../support/netns/index.js';
import { AGENT_BIN, SERVER_BIN, type Proc } from '../support/processes.js';
import { repoRoot } from '../support/upstream.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const KUBELET_MAIN = join(repoRoot(), 'dist/test/support/standin-kubelet/main.js');

function dnsmasqPath(): string | undefined {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/sbin']) {
    try {
      accessSync(join(dir, 'dnsmasq'), constants.X_OK);
      return join(dir, 'dnsmasq');
    } catch {
      // Not in this folder.
    }
  }
  return undefined;
}

const dnsmasq = dnsmasqPath();
const skip = netnsSkipReason() ?? controlPlaneSkipReason() ?? (dnsmasq === undefined ? 'dnsmasq is not installed (apt-get install dnsmasq)' : undefined);

/** The cloud talks to the edge over 10.10.0.0/30; the kubelet listens on the edge's 10.20.0.1, which the cloud has no route to. */
const CLOUD_IP = '10.10.0.1';
const EDGE_IP = '10.10.0.2';
const KUBELET_IP = '10.20.0.1';

/** /etc/netns/<ns>/resolv.conf (what `ip netns exec` mounts over /etc/resolv.conf), removed when the test ends. */
async function namespaceResolvConf(h: Harness, ns: NetworkNamespace, nameserver: string): Promise<string> {
  const createdParent = !existsSync('/etc/netns');
  const dir = join('/etc/netns', ns.name);
  await mkdir(dir, { recursive: true });
  h.defer(async () => {
    await rm(dir, { recursive: true, force: true });
    // Only the folder we made, and only when no one else uses it.
    if (createdParent) await rmdir('/etc/netns').catch(() => undefined);
  });
  const file = join(dir, 'resolv.conf');
  await writeFile(file, `nameserver ${nameserver}\n`);
  return file;
}

async function kubectlOK(cp: ControlPlane, args: string[]): Promise<string> {
  const r = await cp.kubectl(args, { timeoutMs: 30_000 });
  assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

test('DNS route: kube-apiserver reaches the edge kubelet by node name through the records our DNS controller writes', { skip, timeout: 240_000 }, async (t) => {
  let resolvConf = '';
  await t.test('inside the namespaces', async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h);
    const cloud = await NetworkNamespace.create(h, 'yt-cloud');
    const edge = await NetworkNamespace.create(h, 'yt-edge');
    await vethPair({ ns: cloud, name: 'to-edge', addresses: [`${CLOUD_IP}/30`] }, { ns: edge, name: 'to-cloud', addresses: [`${EDGE_IP}/30`] });
    await edge.addAddress('lo', `${KUBELET_IP}/32`);

    // The cloud's DNS server: dnsmasq on its loopback, serving an extra hosts file the test fills from the ConfigMap.
    resolvConf = await namespaceResolvConf(h, cloud, '127.0.0.1');
    const hostsFile = join(dir, 'tunnel-nodes');
    await writeFile(hostsFile, '');
    const dns: Proc = cloud.startProcess(
      h,
      dnsmasq!,
      [
        '--keep-in-foreground',
        '--conf-file=/dev/null',
        '--no-resolv',
        '--no-hosts',
        `--addn-hosts=${hostsFile}`,
        '--listen-address=127.0.0.1',
        '--bind-interfaces',
        '--user=root',
        `--pid-file=${join(dir, 'dnsmasq.pid')}`,
        '--log-facility=-',
      ],
      {},
      { node: false },
    );
    await dns.waitForLine(/started, version/, 10_000);

    // The control plane: etcd here, kube-apiserver in the cloud namespace, calling kubelets by their Hostname address
    // and, as OpenYurt's DNS mode requires, not verifying their serving certificates (the tunnel answers for them).
    const cp = await startControlPlane({
      controllerManager: true,
      apiserverArgs: ['--kubelet-preferred-address-types=Hostname', '--kubelet-certificate-authority='],
      apiserverIn: {
        prefix: ['ip', 'netns', 'exec', cloud.name],
        reach: async ({ etcd, apiserver }) => {
          await exposePort(h, { to: cloud, port: etcd });
          await exposePort(h, { from: cloud, port: apiserver });
        },
      },
    });
    h.defer(() => cp.stop());
    // Edge nodes reach the API server (CSRs); the cloud does not reach them.
    await exposePort(h, { from: cloud, to: edge, port: cp.port });
    const approver = autoApprove(cp, 'yurttunnel-');
    h.defer(() => approver.stop());

    // The internal Service, and kube-proxy's part: its ClusterIP is a cloud address where 10250/10255 reach the master ports.
    await cp.apply({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'x-tunnel-server-internal-svc', namespace: 'kube-system', labels: { name: 'yurt-tunnel-server' } },
      spec: {
        selector: { 'k8s-app': 'yurt-tunnel-server' },
        ports: [
          { name: 'https', port: 10250, targetPort: 10263 },
          { name: 'http', port: 10255, targetPort: 10264 },
        ],
      },
    });
    const clusterIP = await kubectlOK(cp, ['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-internal-svc', '-o', 'jsonpath={.spec.clusterIP}']);
    await cloud.addAddress('lo', `${clusterIP}/32`);
    for (const [port, target] of [
      [10250, 10263],
      [10255, 10264],
    ] as const) {
      await cloud.startProcess(h, NETNS_TOOL, ['forward', `tcp:${clusterIP}:${port}`, `tcp:127.0.0.1:${target}`]).waitForLine(/^ready$/);
    }

    // CoreDNS's hosts plugin, played by dnsmasq: each version of the records becomes its hosts file (re-read on SIGHUP).
    const admin = createKubeClient({ kind: 'kubeconfig', path: cp.adminKubeconfig });
    const records = configMapInformer(admin, 'kube-system', 'yurt-tunnel-nodes', new MemoryLogger(0));
    let served = '';
    const serve = async (text: string | undefined): Promise<void> => {
      await writeFile(hostsFile, `${text ?? ''}\n`);
      served = text ?? '';
      dns.kill('SIGHUP');
    };
    records.addHandler({ add: (cm) => void serve(cm.data?.['tunnel-nodes']), update: (_o, cm) => void serve(cm.data?.['tunnel-nodes']) });
    records.start();
    h.defer(() => records.stop());

    // Our server in cluster mode in the cloud namespace, on its default ports there; the DNS controller on, iptables off.
    const server = cloud.startProcess(h, SERVER_BIN, [
      '--kube-config',
      cp.adminKubeconfig,
      '--cert-dir',
      join(dir, 'server-pki'),
      '--bind-address',
      '0.0.0.0',
      '--cert-ips',
      CLOUD_IP,
      '--interceptor-proxier-uds',
      join(dir, 'proxier.sock'),
      '--enable-dns-controller=true',
      '--enable-iptables=false',
      '--v',
      '2',
    ]);
    await server.waitForLine(/yurt-tunnel-server started/, 60_000);

    // The edge: the stand-in kubelet on the edge's own address, and our agent.
    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-1', dnsNames: ['edge-1'], ips: [KUBELET_IP], usages: ['serverAuth'] });
    const kubeletConfig = join(dir, 'kubelet.json');
    await writeFile(
      kubeletConfig,
      JSON.stringify({ host: KUBELET_IP, port: 10250, cert: serving.cert, key: serving.key, clientCA: cp.pki.ca.cert, nodeName: 'edge-1' }),
    );
    await edge.startProcess(h, KUBELET_MAIN, [kubeletConfig]).waitForLine(/^ready 10250$/, 10_000);
    await putNode(cp, 'edge-1', { internalIP: KUBELET_IP, kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await putPod(cp, 'default', 'p1', 'edge-1');
    const agent = edge.startProcess(h, AGENT_BIN, [
      '--node-name',
      'edge-1',
      '--node-ip',
      KUBELET_IP,
      '--tunnelserver-addr',
      `${CLOUD_IP}:10262`,
      '--kube-config',
      await kubeletKubeconfig(cp, 'edge-1'),
      '--cert-dir',
      join(dir, 'agent-pki'),
      '--meta-port',
      '0',
      '--v',
      '2',
    ]);
    await agent.waitForLine(/connected to tunnel server/, 60_000);

    // The cloud cannot reach the kubelet itself.
    assert.deepEqual(await probeTCP(cloud, KUBELET_IP, 10250), { ok: false, code: 'ENETUNREACH' });
    // The DNS controller's record, served by the cloud's DNS server.
    await waitFor('the record of edge-1', () => served.split('\n').includes(`${clusterIP}\tedge-1`), 30_000);
    let resolved = '';
    for (let i = 0; i < 50 && !resolved.startsWith(clusterIP); i++) {
      resolved = (await cloud.run('getent', ['hosts', 'edge-1'])).stdout.trim();
      if (!resolved.startsWith(clusterIP)) await new Promise((r) => setTimeout(r, 100));
    }
    assert.match(resolved, new RegExp(`^${clusterIP.replace(/\./g, '\\.')}\\s+edge-1$`), "edge-1 resolves to the tunnel's ClusterIP in the cloud namespace");

    // What kube-apiserver does with a kubelet, by name, through DNS and the tunnel.
    assert.equal(await kubectlOK(cp, ['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz']), 'ok');
    assert.match(await kubectlOK(cp, ['logs', 'p1', '-c', 'c1']), /^line 1\nline 2\nline 3\n/);
    assert.equal(await kubectlOK(cp, ['exec', 'p1', '-c', 'c1', '--', 'echo', 'hello', 'through', 'dns']), 'hello through dns\n');
    const follow = spawn(cp.bins.kubectl, [`--kubeconfig=${cp.adminKubeconfig}`, 'logs', '-f', 'p1', '-c', 'c1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(follow, 'exit');
    let out = '';
    follow.stdout.on('data', (c: Buffer) => (out += c.toString()));
    try {
      await waitFor('followed lines', () => /follow 3/.test(out), 20_000);
    } finally {
      follow.kill('SIGINT');
      await exited;
    }
    // The records follow the nodes, and so does the DNS server: a new edge node resolves, a deleted one no longer does.
    const resolves = async (name: string): Promise<string> => (await cloud.run('getent', ['hosts', name])).stdout.trim();
    /** dnsmasq's "read <file> - N names" lines: it re-read the records. */
    const reads = (): string[] => dns.lines.filter((l) => /read .*tunnel-nodes - \d+ names/.test(l));
    const readsBefore = reads().length;
    await putNode(cp, 'edge-2', { internalIP: '10.20.0.2', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await waitFor('the record of edge-2', () => served.split('\n').includes(`${clusterIP}\tedge-2`), 30_000);
    await waitFor(
      'dnsmasq to read 2 records',
      () =>
        reads()
          .slice(readsBefore)
          .some((l) => / - 2 names/.test(l)),
      10_000,
    );
    const readsWithTwo = reads().length;
    assert.match(await resolves('edge-2'), new RegExp(`^${clusterIP.replace(/\./g, '\\.')}\\s+edge-2$`));
    const deleted = await cp.kubectl(['delete', 'node', 'edge-2']);
    assert.equal(deleted.code, 0, deleted.stderr);
    await waitFor('edge-2 gone from the records', () => !served.includes('edge-2'), 30_000);
    await waitFor(
      'dnsmasq to read 1 record again',
      () =>
        reads()
          .slice(readsWithTwo)
          .some((l) => / - 1 names/.test(l)),
      10_000,
    );
    assert.equal(await resolves('edge-2'), '');
    assert.ok(
      server.lines.every((l) => !/forbidden/i.test(l)),
      'the server was refused nothing',
    );
  });
  assert.notEqual(resolvConf, '');
  assert.ok(!existsSync(resolvConf), `${resolvConf} removed`);
});
