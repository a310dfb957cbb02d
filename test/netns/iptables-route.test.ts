// OpenYurt's iptables route end to end, as a user deploys it: a real
// kube-apiserver in a "cloud" network namespace with our server beside it in
// cluster mode (--enable-iptables), and our agent with a stand-in kubelet in
// an "edge" namespace that the cloud cannot reach directly. The Node object
// carries the edge address; kube-apiserver dials it as always, and only the
// rules the server writes make that land on the master port.
//
//   cloud: kube-apiserver (etcd and kube-controller-manager in the root namespace), yurt-tunnel-server (0.0.0.0:10262-10265)
//          to-edge 10.252.0.1/30 ─── agent link ─── to-cloud 10.252.0.2/30 :edge
//          void0 10.254.0.1/30 → route 10.253.0.0/24 (a dead end: no one answers)
//   edge:  lo 10.253.0.2 (node edge-1's InternalIP): stand-in kubelet :10250, yurt-tunnel-agent

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { autoApprove, controlPlaneSkipReason, putNode, putPod, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { suiteHarness } from '../support/harness.js';
import { commandSkipReason, exposePort, NetworkNamespace, netnsSkipReason, vethPair } from '../support/netns/index.js';
import { AGENT_BIN, SERVER_BIN, type Proc } from '../support/processes.js';
import { repoRoot } from '../support/upstream.js';
import { waitFor } from '../support/tunnel.js';

const KUBELET_MAIN = join(repoRoot(), 'dist/test/support/standin-kubelet/main.js');
const NODE_IP = '10.253.0.2';
const SERVER_LINK = '10.252.0.1';

const skip =
  netnsSkipReason() ??
  commandSkipReason('iptables-nft-save', 'apt-get install iptables') ??
  commandSkipReason('setpriv', 'apt-get install util-linux') ??
  controlPlaneSkipReason();

describe('the iptables route end to end: kubectl through rules the server writes itself', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let cloud: NetworkNamespace;
  let dir: string;
  let server: Proc | undefined;

  const serverArgs = (): string[] => [
    '--kube-config',
    cp.adminKubeconfig,
    '--cert-dir',
    join(dir, 'server-pki'),
    '--bind-address',
    '0.0.0.0',
    '--cert-ips',
    SERVER_LINK,
    '--interceptor-proxier-uds',
    join(dir, 'proxier.sock'),
    '--enable-iptables',
    '--enable-dns-controller=false',
    '--graceful-shutdown-timeout',
    '1s',
    '--v',
    '2',
  ];

  async function stopServer(): Promise<void> {
    server!.kill('SIGTERM');
    assert.equal(await server!.exited, 0, server!.lines.join('\n'));
    server = undefined;
  }

  async function ourRules(): Promise<string[]> {
    return (await cloud.must('iptables-save', ['-t', 'nat'])).split('\n').filter((l) => l.includes('TUNNEL-PORT'));
  }

  before(async () => {
    cloud = await NetworkNamespace.create(suite, 'yt-cloud');
    const edge = await NetworkNamespace.create(suite, 'yt-edge');
    await vethPair({ ns: cloud, name: 'to-edge', addresses: [`${SERVER_LINK}/30`] }, { ns: edge, name: 'to-cloud', addresses: ['10.252.0.2/30'] });
    await vethPair({ ns: cloud, name: 'void0', addresses: ['10.254.0.1/30'] }, { ns: cloud, name: 'void1' });
    await cloud.ip('route', 'add', '10.253.0.0/24', 'dev', 'void0');
    await edge.addAddress('lo', `${NODE_IP}/32`);

    dir = await mkdtemp(join(tmpdir(), 'yt-iptables-route-'));
    suite.defer(() => rm(dir, { recursive: true, force: true }));
    // etcd and kube-controller-manager here, kube-apiserver in the cloud namespace, not verifying kubelets'
    // serving certificates: the tunnel answers for them, as OpenYurt's iptables mode requires.
    cp = await startControlPlane({
      controllerManager: true,
      apiserverArgs: ['--kubelet-certificate-authority='],
      apiserverIn: {
        prefix: cloud.execPrefix,
        reach: async ({ etcd, apiserver }) => {
          await exposePort(suite, { to: cloud, port: etcd });
          await exposePort(suite, { from: cloud, port: apiserver });
        },
      },
    });
    suite.defer(() => cp.stop());
    const approver = autoApprove(cp, 'yurttunnel-');
    suite.defer(() => approver.stop());

    // The edge: a kubelet on the node's address, and an agent with a certificate naming the node.
    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-1', dnsNames: ['edge-1'], ips: [NODE_IP], usages: ['serverAuth'] });
    await writeFile(
      join(dir, 'kubelet.json'),
      JSON.stringify({ cert: serving.cert, key: serving.key, clientCA: cp.pki.ca.cert, host: NODE_IP, port: 10250, nodeName: 'edge-1' }),
    );
    await edge.startProcess(suite, KUBELET_MAIN, [join(dir, 'kubelet.json')]).waitForLine(/^ready 10250$/);
    await putNode(cp, 'edge-1', { internalIP: NODE_IP, kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    await putPod(cp, 'default', 'p1', 'edge-1');
    // The cloud's own node, reached directly.
    await putNode(cp, 'cloud-1', { internalIP: SERVER_LINK, kubeletPort: 10250 });
    const agentCert = issueCertificate(cp.pki.ca, {
      commonName: 'tunnel-agent-client',
      organizations: ['openyurt:yurttunnel'],
      dnsNames: ['edge-1'],
      ips: [NODE_IP],
      usages: ['clientAuth'],
    });
    await writeFile(join(dir, 'agent.crt'), agentCert.cert);
    await writeFile(join(dir, 'agent.key'), agentCert.key);
    await writeFile(join(dir, 'ca.crt'), cp.pki.ca.cert);
    edge.startProcess(suite, AGENT_BIN, [
      '--node-name',
      'edge-1',
      '--node-ip',
      NODE_IP,
      '--tunnelserver-addr',
      `${SERVER_LINK}:10262`,
      '--ca-file',
      join(dir, 'ca.crt'),
      '--cert-file',
      join(dir, 'agent.crt'),
      '--key-file',
      join(dir, 'agent.key'),
      '--meta-port',
      '0',
      '--v',
      '2',
    ]);
  });
  after(() => suite.close());

  test('without NET_ADMIN the server logs one error naming it and serves on (the agent connects); no rule is written', async () => {
    server = cloud.startProcess(suite, SERVER_BIN, serverArgs(), {}, { prefix: ['setpriv', '--inh-caps=-net_admin', '--bounding-set=-net_admin'] });
    await server.waitForLine(/yurt-tunnel-server started/, 60_000);
    await server.waitForLine(/agent connected.*agentID=edge-1/, 30_000);
    const errors = server.lines.filter((l) => l.startsWith('E'));
    assert.equal(errors.length, 1, errors.join('\n'));
    assert.match(errors[0]!, /iptables manager not started: iptables-nft-save may not change the nat table: the process needs the NET_ADMIN capability/);
    assert.deepEqual(await ourRules(), []);
    await stopServer();
  });

  test('the server writes the rules itself; kubectl get --raw node proxy healthz, logs, logs -f and exec work through them', async () => {
    server = cloud.startProcess(suite, SERVER_BIN, serverArgs());
    await server.waitForLine(/iptables rules written.*family=ipv4/, 60_000);
    await server.waitForLine(/agent connected.*agentID=edge-1/, 30_000);
    const rules = await ourRules();
    assert.ok(
      rules.some((l) => /-A TUNNEL-PORT-10250 .*-j DNAT --to-destination 127\.0\.0\.1:10263/.test(l)),
      rules.join('\n'),
    );
    assert.ok(
      rules.some((l) => l.startsWith(`-A TUNNEL-PORT-10250 -d ${SERVER_LINK}/32 `) && l.endsWith('-j RETURN')),
      rules.join('\n'),
    );
    const metrics = await cloud.must(process.execPath, [
      '-e',
      "fetch('http://127.0.0.1:10265/metrics').then((r) => r.text()).then((t) => process.stdout.write(t))",
    ]);
    assert.match(metrics, /^yurttunnel_server_cloud_nodes_counter 1$/m);

    const healthz = await cp.kubectl(['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz']);
    assert.equal(healthz.code, 0, healthz.stderr);
    assert.equal(healthz.stdout, 'ok');

    const logs = await cp.kubectl(['logs', 'p1', '-c', 'c1']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /^line 1\nline 2\nline 3\n/);

    const follow = spawn(cp.bins.kubectl, [`--kubeconfig=${cp.adminKubeconfig}`, 'logs', '-f', 'p1', '-c', 'c1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = once(follow, 'exit');
    let out = '';
    follow.stdout.on('data', (c: Buffer) => (out += c.toString()));
    try {
      await waitFor('followed lines', () => /follow 3/.test(out), 15_000);
    } finally {
      follow.kill('SIGINT');
      await exited;
    }

    const exec = await cp.kubectl(['exec', 'p1', '-c', 'c1', '--', 'echo', 'hello', 'through', 'the', 'rules']);
    assert.equal(exec.code, 0, exec.stderr);
    assert.equal(exec.stdout, 'hello through the rules\n');
    const interactive = await cp.kubectl(['exec', '-i', 'p1', '-c', 'c1', '--', 'cat'], { input: 'stdin too\n' });
    assert.equal(interactive.code, 0, interactive.stderr);
    assert.equal(interactive.stdout, 'stdin too\n');
  });

  test('stopping the server removes the rules, and the same calls fail', async () => {
    await stopServer();
    assert.deepEqual(await ourRules(), []);
    for (const args of [
      ['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz'],
      ['logs', 'p1', '-c', 'c1'],
      ['exec', 'p1', '-c', 'c1', '--', 'echo', 'hi'],
    ]) {
      const r = await cp.kubectl(args, { timeoutMs: 60_000 });
      assert.notEqual(r.code, 0, `kubectl ${args.join(' ')} should fail`);
      // kube-apiserver's own dial, as it fails where edge nodes cannot be reached.
      assert.match(r.stderr, /dial tcp 10\.253\.0\.2:10250: connect: no route to host/, `kubectl ${args.join(' ')}: ${r.stderr}`);
    }
  });
});
