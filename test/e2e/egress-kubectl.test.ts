// kube-apiserver's egress selector through our server and agent, driven by
// kubectl: a real kube-apiserver configured with an EgressSelectorConfiguration
// reaches the stand-in kubelet of node edge-1 only through the tunnel, with
// the agent's link over gRPC and over a WebSocket.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { TunnelAgent } from '../../pkg/agent/app.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import type { TunnelServer } from '../../pkg/server/app.js';
import { WsAgentCall } from '../../pkg/endpoint/ws-agent-call.js';
import { startClusterAgent, startClusterServer } from '../support/cluster.js';
import { controlPlaneSkipReason, autoApprove, putNode, putPod, startControlPlane, type ControlPlane, type EgressSelector } from '../support/envtest/index.js';
import { connect as tlsConnect } from 'node:tls';
import { harness, suiteHarness } from '../support/harness.js';
import { checkExec } from '../support/kubectl-stream.js';
import { CHANNEL, StandinKubelet, upgradeToChannelWebSocket } from '../support/standin-kubelet/index.js';
import { startEchoServer, waitFor } from '../support/tunnel.js';
import { EDGE_WORKER_LABEL } from '../../pkg/kube/tunnel-addresses.js';

const skip = controlPlaneSkipReason();

/** The kubectl calls of the issue, each through the egress selector and our tunnel. */
function kubectlCases(state: () => { cp: ControlPlane; kubelet: StandinKubelet; agent: TunnelAgent }): void {
  test('kubectl get --raw through the node proxy: healthz and metrics', async () => {
    const { cp } = state();
    const healthz = await cp.kubectl(['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz']);
    assert.equal(healthz.code, 0, healthz.stderr);
    assert.equal(healthz.stdout, 'ok');
    const metrics = await cp.kubectl(['get', '--raw', '/api/v1/nodes/edge-1/proxy/metrics']);
    assert.equal(metrics.code, 0, metrics.stderr);
    assert.match(metrics.stdout, /^standin_kubelet_up 1$/m);
  });

  test('kubectl logs, and logs -f whose kubelet side stops within a second of kubectl stopping', async () => {
    const { cp, kubelet, agent } = state();
    const logs = await cp.kubectl(['logs', 'p1', '-c', 'c1']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.match(logs.stdout, /^line 1\nline 2\nline 3\n/);

    const before = kubelet.followStreams.length;
    const follow = spawn(cp.bins.kubectl, [`--kubeconfig=${cp.adminKubeconfig}`, 'logs', '-f', 'p1', '-c', 'c1'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    follow.stdout.on('data', (c: Buffer) => (out += c.toString()));
    const exited = once(follow, 'exit');
    await waitFor('followed lines', () => /follow 3/.test(out), 15_000);
    assert.ok(agent.clients.connCount >= 1, 'the stream runs through the agent');
    const record = kubelet.followStreams[kubelet.followStreams.length - 1]!;
    assert.equal(kubelet.followStreams.length, before + 1);
    follow.kill('SIGINT');
    const stoppedAt = performance.now();
    await exited;
    await waitFor('the kubelet side to end', () => record.endedAt !== null, 5000);
    assert.ok(record.endedAt! - stoppedAt < 1000, `kubelet stream ended ${Math.round(record.endedAt! - stoppedAt)} ms after kubectl stopped`);
  });

  test('kubectl exec, with and without -i', async () => {
    const { cp } = state();
    await checkExec(cp, ['hello', 'from', 'the', 'edge'], 'stdin through the tunnel');
  });

  test('kubectl port-forward: a byte-exact echo through the forwarded port', async () => {
    const { cp } = state();
    const pf = spawn(cp.bins.kubectl, [`--kubeconfig=${cp.adminKubeconfig}`, 'port-forward', 'pod/p1', ':80', '--address=127.0.0.1'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = once(pf, 'exit');
    try {
      let out = '';
      pf.stdout.on('data', (c: Buffer) => (out += c.toString()));
      await waitFor('port-forward to listen', () => /Forwarding from 127\.0\.0\.1:\d+ -> 80/.test(out), 15_000);
      const port = Number(/Forwarding from 127\.0\.0\.1:(\d+)/.exec(out)![1]);
      const payload = randomBytes(1024 * 1024);
      const socket = connect(port, '127.0.0.1');
      await once(socket, 'connect');
      const chunks: Buffer[] = [];
      let received = 0;
      socket.on('data', (c: Buffer) => {
        chunks.push(c);
        received += c.length;
      });
      socket.write(payload);
      await waitFor('the echo', () => received >= payload.length, 20_000);
      socket.destroy();
      assert.ok(Buffer.concat(chunks).subarray(0, payload.length).equals(payload), 'byte-exact');
    } finally {
      pf.kill('SIGINT');
      await exited;
    }
  });
}

/** The calls fail naming the node, through the frontend of `mode` (kube-apiserver words the two differently). */
async function failsNamingTheNode(cp: ControlPlane, mode: EgressSelector['mode'], dialTimeoutMs: number): Promise<void> {
  for (const args of [
    ['get', '--raw', '/api/v1/nodes/edge-1/proxy/healthz'],
    ['logs', 'p1', '-c', 'c1'],
    ['exec', 'p1', '-c', 'c1', '--', 'echo', 'hi'],
  ]) {
    const started = performance.now();
    const r = await cp.kubectl(args, { timeoutMs: 30_000 });
    const took = performance.now() - started;
    assert.notEqual(r.code, 0, `kubectl ${args.join(' ')} should fail`);
    assert.match(r.stderr, /edge-1/, `kubectl ${args.join(' ')}: ${r.stderr}`);
    // HTTPConnect: kube-apiserver quotes the CONNECT answer; GRPC: the DIAL_RSP error as it is.
    if (mode === 'HTTPConnect') assert.match(r.stderr, /proxy error from \S+proxier\.sock while dialing 127\.0\.0\.1:\d+, code 503/, r.stderr);
    else assert.doesNotMatch(r.stderr, /proxy error/, r.stderr);
    // kubectl exec tries twice (WebSocket, then SPDY); each attempt ends within the dial timeout.
    assert.ok(took < 2 * dialTimeoutMs + 5000, `kubectl ${args.join(' ')} took ${Math.round(took)} ms`);
  }
}

describe('kube-apiserver egress selector through the tunnel (kubectl)', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let server: TunnelServer;
  let agent: TunnelAgent;
  let kubelet: StandinKubelet;
  let cloudKubelet: StandinKubelet;
  let dir: string;
  const dialTimeoutMs = 3000;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    suite.defer(() => cp.stop());
    const approver = autoApprove(cp, 'yurttunnel-');
    suite.defer(() => approver.stop());
    dir = await mkdtemp(join(tmpdir(), 'yt-egress-'));
    suite.defer(() => rm(dir, { recursive: true, force: true }));
    const echo = await startEchoServer(suite);
    const serving = issueCertificate(cp.pki.ca, { commonName: 'edge-1', ips: ['127.0.0.1'], usages: ['serverAuth'] });
    kubelet = new StandinKubelet({
      cert: serving.cert,
      key: serving.key,
      clientCA: cp.pki.ca.cert,
      portForwardTargets: { 80: { host: '127.0.0.1', port: echo.port } },
    });
    await kubelet.start();
    suite.defer(() => kubelet.close());
    await putNode(cp, 'edge-1', { internalIP: '127.0.0.1', kubeletPort: kubelet.port, labels: { [EDGE_WORKER_LABEL]: 'true' } });
    await putPod(cp, 'default', 'p1', 'edge-1');
    // A cloud node no agent serves: the egress socket dials its kubelet directly (--egress-direct-dial=auto).
    const cloudServing = issueCertificate(cp.pki.ca, { commonName: 'cloud-1', ips: ['127.0.0.2'], usages: ['serverAuth'] });
    cloudKubelet = new StandinKubelet({ cert: cloudServing.cert, key: cloudServing.key, clientCA: cp.pki.ca.cert, host: '127.0.0.2' });
    await cloudKubelet.start();
    suite.defer(() => cloudKubelet.close());
    await putNode(cp, 'cloud-1', { internalIP: '127.0.0.2', kubeletPort: cloudKubelet.port, labels: { [EDGE_WORKER_LABEL]: 'false' } });
    await putPod(cp, 'default', 'cloud-pod', 'cloud-1');
    // The GRPC frontend on its own socket; HTTPConnect is tested on the proxier socket, the same CONNECT frontend.
    server = await startClusterServer(suite, cp, dir, { extra: { dialTimeoutMs, egressSelector: { uds: join(dir, 'egress.sock'), mode: 'grpc' } } });
    agent = await startClusterAgent(suite, cp, server, dir, 'edge-1');
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
  });
  after(() => suite.close());

  const state = (): { cp: ControlPlane; kubelet: StandinKubelet; agent: TunnelAgent } => ({ cp, kubelet, agent });

  test("interceptor routing from informers: an exec whose Host is kube-apiserver's address reaches the node of the pod in its path", async (t) => {
    // The file's server and agent keep running (and making timers) across tests: no per-test leak check here.
    const h = harness(t, { leakCheck: false });
    // As kube-apiserver sends it to a kubelet: its own client certificate, its own address in Host.
    const socket = tlsConnect({
      host: '127.0.0.1',
      port: server.master.address('secure').port,
      ca: cp.pki.ca.cert,
      cert: cp.pki.kubeletClient.cert,
      key: cp.pki.kubeletClient.key,
      servername: '',
      ALPNProtocols: ['http/1.1'],
    });
    h.defer(() => socket.destroy());
    await once(socket, 'secureConnect');
    const execsBefore = kubelet.requests.filter((r) => r.target.startsWith('/exec/')).length;
    const { client } = await upgradeToChannelWebSocket({
      socket,
      target: '/exec/default/p1/c1?command=echo&command=routed&command=by&command=pod&output=1&error=1',
      protocols: ['v5.channel.k8s.io'],
      host: `127.0.0.1:${cp.port}`,
    });
    const stdout: Buffer[] = [];
    client.on('data', (channel: number, piece: Buffer) => {
      if (channel === CHANNEL.stdout) stdout.push(piece);
    });
    await once(client, 'closeFrame');
    assert.equal(Buffer.concat(stdout).toString(), 'routed by pod\n');
    const exec = kubelet.requests.filter((r) => r.target.startsWith('/exec/'));
    assert.equal(exec.length, execsBefore + 1);
    assert.match(exec[exec.length - 1]!.clientSubject.commonName, /tunnel-proxy-client/, "the kubelet sees the tunnel's CSR-issued proxy-client certificate");
  });

  // Each part says which egress selector it needs; kube-apiserver restarts only when the mode changes.
  const httpConnect = (): EgressSelector => ({ mode: 'HTTPConnect', udsPath: join(dir, 'proxier.sock') });
  const grpc = (): EgressSelector => ({ mode: 'GRPC', udsPath: join(dir, 'egress.sock') });

  describe('HTTPConnect', () => {
    before(() => cp.useEgressSelector(httpConnect()));
    kubectlCases(state);
  });

  describe('GRPC', () => {
    before(() => cp.useEgressSelector(grpc()));
    kubectlCases(state);
  });

  // Issue 37 item 2: the same calls with the agent's link over a WebSocket (--transport websocket), straight to the agent port.
  describe('HTTPConnect, the agent over a WebSocket', () => {
    before(async () => {
      await agent.stop();
      await waitFor('edge-1 to leave', () => server.tunnel.registry.agentCount === 0, 10_000);
      agent = await startClusterAgent(suite, cp, server, dir, 'edge-1', { transport: 'websocket' });
      await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
      const backend = server.tunnel.registry.all()[0]!;
      assert.ok((backend.sessionLink?.transport ?? backend.link) instanceof WsAgentCall, 'the agent joined over a WebSocket');
      await cp.useEgressSelector(httpConnect());
    });
    kubectlCases(state);
  });

  test('GRPC: a cloud node no agent serves is dialled directly by the server: kubectl get --raw and logs work', async () => {
    await cp.useEgressSelector(grpc());
    await waitFor('the Node informer to list the nodes', () => server.cluster?.nodes.synced() === true, 20_000);
    const healthz = await cp.kubectl(['get', '--raw', '/api/v1/nodes/cloud-1/proxy/healthz']);
    assert.equal(healthz.code, 0, healthz.stderr);
    assert.equal(healthz.stdout, 'ok');
    const logs = await cp.kubectl(['logs', 'cloud-pod', '-c', 'c1']);
    assert.equal(logs.code, 0, logs.stderr);
    assert.ok(
      cloudKubelet.requests.some((r) => r.target.startsWith('/containerLogs/default/cloud-pod/c1')),
      'the cloud kubelet served the logs',
    );
    const metrics = await server.tunnel.metrics.registry.metrics();
    assert.match(metrics, /^yurttunnel_server_direct_dials_total\{result="connected"\} [1-9]/m);
  });

  describe('with the agent stopped', () => {
    before(async () => {
      await agent.stop();
      await waitFor('edge-1 to leave', () => server.tunnel.registry.agentCount === 0, 10_000);
    });
    test('the same calls fail within the dial timeout with an error naming the node (GRPC)', async () => {
      await cp.useEgressSelector(grpc());
      await failsNamingTheNode(cp, 'GRPC', dialTimeoutMs);
    });
    test('the same calls fail within the dial timeout with an error naming the node (HTTPConnect)', async () => {
      await cp.useEgressSelector(httpConnect());
      await failsNamingTheNode(cp, 'HTTPConnect', dialTimeoutMs);
    });
  });
});
