// Cluster mode against a real kube-apiserver and kube-controller-manager: the
// server and the agent get their certificates through CSRs, traffic flows,
// the serving certificate rotates under a 64 MiB transfer, an agent with
// another node's certificate is refused.

import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { after, before, describe, test } from 'node:test';
import { TunnelAgent } from '../../pkg/agent/app.js';
import { startClusterAgent, startClusterServer } from '../support/cluster.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { PatternVerifier, writePattern } from '../support/standin-kubelet/index.js';
import { connectVia, startEchoServer, startTCPServer, tempDir, waitFor } from '../support/tunnel.js';
import { autoApprove, controlPlaneSkipReason, startControlPlane, type ControlPlane } from '../support/envtest/index.js';

const skip = controlPlaneSkipReason();
if (skip !== undefined) console.log(`# skipping cluster-mode tests: ${skip}`);

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
  let approver: ReturnType<typeof autoApprove>;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    // yurt-controller-manager's job in a real cluster: approve the tunnel's CSRs.
    approver = autoApprove(cp, 'yurttunnel-');
  });
  after(async () => {
    await approver?.stop();
    await cp?.stop();
  });

  test('server and agent get their certificates by CSR, traffic flows, and the serving certificate rotates under a 64 MiB transfer', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const serverLog = new MemoryLogger(2);
    const server = await startClusterServer(h, cp, dir, { log: serverLog });
    assert.equal(serverLog.records.filter((r) => r.message.includes('DNS controller not started')).length, 1);
    assert.equal(serverLog.records.filter((r) => r.message.includes('iptables manager not started')).length, 1);

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
    const c = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`);
    assert.equal(c.status, 200);
    c.socket.end('hello through the cluster-mode tunnel');
    const chunks: Buffer[] = [];
    for await (const chunk of c.socket) chunks.push(chunk as Buffer);
    assert.equal(Buffer.concat(chunks).toString(), 'hello through the cluster-mode tunnel');

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

  test('an agent using another node\'s CSR-issued certificate is refused', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const server = await startClusterServer(h, cp, dir);
    await startClusterAgent(h, cp, server, dir, 'edge-3');
    await waitFor('agent edge-3 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
    // An impostor claims edge-4 but holds edge-3's certificate (copied from its --cert-dir).
    const stolen = await readFile(join(dir, 'agent-edge-3-pki', 'yurttunnel-agent-current.pem'), 'utf8');
    const cert = stolen.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----\n?/)![0];
    const key = stolen.match(/-----BEGIN (?:RSA )?PRIVATE KEY-----[\s\S]+?-----END (?:RSA )?PRIVATE KEY-----\n?/)![0];
    const { writeFile, mkdir } = await import('node:fs/promises');
    const impostorDir = join(dir, 'impostor');
    await mkdir(impostorDir);
    await writeFile(join(impostorDir, 'tls.crt'), cert);
    await writeFile(join(impostorDir, 'tls.key'), key);
    await writeFile(join(impostorDir, 'ca.crt'), cp.pki.ca.cert);
    const log = new MemoryLogger(2);
    const impostor = await TunnelAgent.start({
      nodeName: 'edge-4',
      nodeIP: '127.0.0.1',
      tunnelServerAddr: `127.0.0.1:${server.agentEndpoint.address.port}`,
      certDir: impostorDir,
      dialTimeoutMs: 3000,
      keepaliveTimeMs: 35_000,
      keepaliveTimeoutMs: 20_000,
      syncIntervalMs: 200,
      syncIntervalCapMs: 1000,
      drainTimeoutMs: 1000,
      logger: log,
    });
    h.defer(() => impostor.stop());
    await waitFor('the refusal', () => log.records.some((r) => /agent identity check \(strict\) failed/.test(JSON.stringify(r.fields))), 10_000);
    assert.equal(server.tunnel.registry.agentCount, 1);
    assert.deepEqual(server.tunnel.registry.all().map((b) => b.agentID), ['edge-3']);
  });
});
