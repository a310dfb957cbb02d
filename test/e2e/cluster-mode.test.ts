// Cluster mode against a real kube-apiserver and kube-controller-manager: the
// server and the agent get their certificates through CSRs, traffic flows,
// the serving certificate rotates under a 64 MiB transfer, an agent with
// another node's certificate is refused.

import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { TunnelServer } from '../../pkg/server/app.js';
import { agentKubeConfigSource } from '../../pkg/kube/client.js';
import { clusterServerOptions, kubeletKubeconfig, startClusterAgent, startClusterServer, startTestAgent } from '../support/cluster.js';
import { kubeconfigYAML } from '../support/envtest/pki.js';
import { harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, startProcess } from '../support/processes.js';
import { StandinKubelet } from '../support/standin-kubelet/index.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { PatternVerifier, writePattern } from '../support/standin-kubelet/index.js';
import { connectVia, roundTrip, startEchoServer, startTCPServer, tempDir, waitFor } from '../support/tunnel.js';
import { autoApprove, controlPlaneSkipReason, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { localServerFlags } from '../../hack/local-tunnel.js';

const skip = controlPlaneSkipReason();

function peerCertificate(port: number, ca: string, alpn: string): Promise<X509Certificate> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, ca, servername: 'localhost', ALPNProtocols: [alpn], rejectUnauthorized: false }, () => {
      const raw = s.getPeerX509Certificate();
      s.destroy();
      if (raw === undefined) reject(new Error('no peer certificate'));
      else resolve(raw);
    });
    s.once('error', reject);
  });
}

describe('cluster mode with a real kube-apiserver', { skip }, () => {
  let cp: ControlPlane;
  let approver: ReturnType<typeof autoApprove> | undefined;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    // yurt-controller-manager's job in a real cluster: approve the tunnel's CSRs.
    approver = autoApprove(cp, 'yurttunnel-');
  });
  after(async () => {
    await approver?.stop();
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- unset if before() failed
    await cp?.stop();
  });

  test('server and agent get their certificates by CSR, traffic flows, and the serving certificate rotates under a 64 MiB transfer', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const serverLog = new MemoryLogger(2);
    const server = await startClusterServer(h, cp, dir, { log: serverLog });
    assert.equal(serverLog.records.filter((r) => r.message.includes('DNS controller started')).length, 1);
    assert.equal(serverLog.records.filter((r) => r.message.includes('CSR approver started')).length, 1, 'on by default');

    const serving = new X509Certificate(await readFile(join(dir, 'server-pki', 'yurttunnel-server-current.pem'), 'utf8'));
    assert.match(serving.subject, /CN=system:node:tunnel-server/);
    assert.ok(serving.checkIssued(new X509Certificate(cp.pki.ca.cert)), 'signed by the cluster CA');
    const proxyClient = new X509Certificate(await readFile(join(dir, 'server-pki', 'yurttunnel-server-proxy-client-current.pem'), 'utf8'));
    assert.match(proxyClient.subject, /CN=tunnel-proxy-client/);

    await startClusterAgent(h, cp, server, dir, 'edge-1');
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
    const agentCert = new X509Certificate(await readFile(join(dir, 'agent-edge-1-pki', 'yurttunnel-agent-current.pem'), 'utf8'));
    assert.match(agentCert.subject, /CN=tunnel-agent-client/);
    assert.match(agentCert.subjectAltName ?? '', /DNS:edge-1/);
    assert.match(agentCert.subjectAltName ?? '', /IP Address:127\.0\.0\.1/);

    const echo = await startEchoServer(h);
    assert.equal(
      await roundTrip(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`, 'hello through the cluster-mode tunnel'),
      'hello through the cluster-mode tunnel',
    );

    // 64 MiB from the node, and a new wanted address (a tunnel Service) rotating the serving certificate meanwhile.
    const total = 64 * 1024 * 1024;
    const source = await startTCPServer(h, (s) => writePattern(s, total));
    const download = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${source.port}`);
    assert.equal(download.status, 200);
    const verifier = new PatternVerifier();
    verifier.update(download.rest);
    const done = new Promise<void>((resolve, reject) => {
      download.socket.on('data', (chunk: Buffer) => verifier.update(chunk));
      download.socket.once('end', resolve);
      download.socket.once('error', reject);
    });
    download.socket.resume();
    let rotated = false;
    server.cluster!.serving.onRotated(() => (rotated = true));
    await cp.apply({
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'x-tunnel-server-internal-svc', namespace: 'kube-system', labels: { name: 'yurt-tunnel-server' } },
      spec: { type: 'ClusterIP', ports: [{ name: 'https', port: 10263, targetPort: 10263 }] },
    });
    const clusterIP = (await cp.kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-internal-svc', '-o', 'jsonpath={.spec.clusterIP}'])).stdout;
    assert.match(clusterIP, /^10\.\d+\.\d+\.\d+$/);
    await waitFor('the serving certificate to rotate', () => rotated, 30_000);
    await done;
    assert.equal(verifier.received, total, 'the transfer in flight finished byte-exact');

    const fresh = await peerCertificate(server.agentEndpoint.address.port, cp.pki.ca.cert, 'h2');
    assert.match(fresh.subjectAltName ?? '', new RegExp(`IP Address:${clusterIP.replace(/\./g, '\\.')}`), 'new connections see the new certificate');
    assert.notEqual(fresh.serialNumber, serving.serialNumber);
    const secure = await peerCertificate(server.master.address('secure').port, cp.pki.ca.cert, 'http/1.1');
    assert.equal(secure.serialNumber, fresh.serialNumber, 'the secure master port serves it too');
    // A new agent link handshakes with the rotated certificate.
    await startClusterAgent(h, cp, server, dir, 'edge-2');
    await waitFor('agent edge-2 to register', () => server.tunnel.registry.agentCount === 2, 20_000);
    await cp.kubectl(['delete', 'svc', '-n', 'kube-system', 'x-tunnel-server-internal-svc']);
  });

  test('an agent bootstraps with --apiserver-addr and a service-account token (RBAC for CSRs only)', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const server = await startClusterServer(h, cp, dir);
    await cp.apply({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'yurt-tunnel-agent', namespace: 'kube-system' } },
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRole',
          metadata: { name: 'yurt-tunnel-agent' },
          rules: [{ apiGroups: ['certificates.k8s.io'], resources: ['certificatesigningrequests'], verbs: ['create', 'get', 'list', 'watch'] }],
        },
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: 'yurt-tunnel-agent' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'yurt-tunnel-agent' },
          subjects: [{ kind: 'ServiceAccount', name: 'yurt-tunnel-agent', namespace: 'kube-system' }],
        },
      ],
    });
    const token = await cp.kubectl(['create', 'token', 'yurt-tunnel-agent', '-n', 'kube-system']);
    assert.equal(token.code, 0, token.stderr);
    const saDir = join(dir, 'serviceaccount');
    await mkdir(saDir);
    await writeFile(join(saDir, 'token'), token.stdout.trim());
    await writeFile(join(saDir, 'ca.crt'), cp.pki.ca.cert);
    const log = new MemoryLogger(2);
    await startTestAgent(h, server, {
      nodeName: 'edge-sa',
      certDir: join(dir, 'agent-pki'),
      kubeSource: agentKubeConfigSource({ apiserverAddr: `127.0.0.1:${cp.port}`, serviceAccountDir: saDir })!,
      logger: log,
    });
    await waitFor('agent edge-sa to register', () => server.tunnel.registry.all().some((b) => b.agentID === 'edge-sa'), 20_000);
    const csr = (await cp.kubectl(['get', 'csr', '-o', 'jsonpath={range .items[*]}{.spec.username}{"\\n"}{end}'])).stdout;
    assert.match(csr, /^system:serviceaccount:kube-system:yurt-tunnel-agent$/m, 'the CSR was made with the service account');
  });

  test('an API server that cannot be reached at start: the stored certificates serve, agents connect, the log says what and where', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    // A first run leaves certificates in the stores.
    const first = await startClusterServer(h, cp, dir);
    const agentDir = join(dir, 'agent-edge-5-pki');
    const firstAgent = await startClusterAgent(h, cp, first, dir, 'edge-5');
    await waitFor('agent edge-5 to register', () => first.tunnel.registry.agentCount === 1, 20_000);
    await firstAgent.stop();
    await first.stop();

    // The same credentials, pointed at a port where nothing listens.
    const dead = join(dir, 'unreachable.kubeconfig');
    await writeFile(dead, kubeconfigYAML('https://127.0.0.1:1', cp.pki.ca.cert, cp.pki.admin));
    const log = new MemoryLogger(2);
    const server = await TunnelServer.start(clusterServerOptions(dir, dead, log));
    h.defer(() => server.stop());
    await waitFor('a retry warning', () => log.records.some((r) => r.message.includes('cannot list/watch from the API server')), 10_000);
    const warning = log.records.find((r) => r.message.includes('cannot list/watch from the API server'))!;
    assert.equal(warning.fields.apiServer, 'https://127.0.0.1:1');
    assert.match(String(warning.fields.error), /ECONNREFUSED/);
    await startTestAgent(h, server, { nodeName: 'edge-5', certDir: agentDir, kubeSource: { kind: 'kubeconfig', path: dead } });
    await waitFor('agent edge-5 to register with the cut-off server', () => server.tunnel.registry.agentCount === 1, 20_000);
    const echo = await startEchoServer(h);
    assert.equal(await roundTrip(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`, 'still serving'), 'still serving');
  });

  test("an agent using another node's CSR-issued certificate is refused", async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const server = await startClusterServer(h, cp, dir);
    await startClusterAgent(h, cp, server, dir, 'edge-3');
    await waitFor('agent edge-3 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
    // An impostor claims edge-4 but holds edge-3's certificate (copied from its --cert-dir).
    const stolen = await readFile(join(dir, 'agent-edge-3-pki', 'yurttunnel-agent-current.pem'), 'utf8');
    const cert = stolen.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/)![0];
    const key = stolen.match(/-----BEGIN (?:RSA )?PRIVATE KEY-----[\s\S]+?-----END (?:RSA )?PRIVATE KEY-----\n?/)![0];
    const impostorDir = join(dir, 'impostor');
    await mkdir(impostorDir);
    await writeFile(join(impostorDir, 'tls.crt'), cert);
    await writeFile(join(impostorDir, 'tls.key'), key);
    await writeFile(join(impostorDir, 'ca.crt'), cp.pki.ca.cert);
    const log = new MemoryLogger(2);
    await startTestAgent(h, server, { nodeName: 'edge-4', certDir: impostorDir, logger: log });
    await waitFor('the refusal', () => log.records.some((r) => /agent identity check \(strict\) failed/.test(JSON.stringify(r.fields))), 10_000);
    assert.equal(server.tunnel.registry.agentCount, 1);
    assert.deepEqual(
      server.tunnel.registry.all().map((b) => b.agentID),
      ['edge-3'],
    );
  });
  test('the CLIs in cluster mode: server and agent processes with kubeconfigs, kube-apiserver through the GRPC egress socket', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const egress = join(dir, 'egress.sock');
    const server = startProcess(h, SERVER_BIN, [
      '--kube-config',
      cp.adminKubeconfig,
      ...localServerFlags({ certDir: join(dir, 'server-pki'), udsPath: join(dir, 'proxier.sock') }),
      '--egress-selector-enable',
      '--egress-selector-mode',
      'grpc',
      '--egress-selector-uds',
      egress,
      '--v',
      '2',
      // The root network namespace: its iptables are never ours to change.
      '--enable-iptables=false',
    ]);
    const started = await server.waitForLine(/yurt-tunnel-server started/, 30_000);
    assert.match(started, /mode=cluster/);
    const agentPort = Number(/agentAddress=127\.0\.0\.1:(\d+)/.exec(started)![1]);
    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-cli', ips: ['127.0.0.1'], usages: ['serverAuth'] });
    const kubelet = new StandinKubelet({ cert: serving.cert, key: serving.key, clientCA: cp.pki.ca.cert, nodeName: 'edge-cli' });
    await kubelet.start();
    h.defer(() => kubelet.close());
    await putNode(cp, 'edge-cli', { internalIP: '127.0.0.1', kubeletPort: kubelet.port });
    const agent = startProcess(h, AGENT_BIN, [
      '--node-name',
      'edge-cli',
      '--node-ip',
      '127.0.0.1',
      '--tunnelserver-addr',
      `127.0.0.1:${agentPort}`,
      '--meta-port',
      '0',
      '--kube-config',
      await kubeletKubeconfig(cp, 'edge-cli'),
      '--cert-dir',
      join(dir, 'agent-pki'),
      '--v',
      '2',
    ]);
    await agent.waitForLine(/connected to tunnel server/, 30_000);
    await cp.restartAPIServer({ egressSelector: { mode: 'GRPC', udsPath: egress } });
    try {
      const healthz = await cp.kubectl(['get', '--raw', '/api/v1/nodes/edge-cli/proxy/healthz']);
      assert.equal(healthz.code, 0, healthz.stderr);
      assert.equal(healthz.stdout, 'ok');
      assert.equal(kubelet.requests.filter((r) => r.target === '/healthz').length, 1);
    } finally {
      await cp.restartAPIServer();
    }
    server.kill('SIGTERM');
    assert.equal(await server.exited, 0);
  });
});
