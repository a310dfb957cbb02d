// An agent without --tunnelserver-addr finds the server from Service
// kube-system/x-tunnel-server-svc in a real kube-apiserver: through a
// NodePort (on a cloud node's address, a relay standing in for kube-proxy),
// a LoadBalancer's ingress, and the x-tunnel-server-external-addr
// annotation's host and port; a ClusterIP-only Service gives a message naming
// the Service and what to set, and the agent keeps trying until it is fixed.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { TunnelServer } from '../../pkg/server/app.js';
import { kubeletKubeconfig, startClusterServer, startTestAgent } from '../support/cluster.js';
import { autoApprove, controlPlaneSkipReason, deleteObject, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness, suiteHarness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { tempDir, waitFor } from '../support/tunnel.js';
import { startTcpForward } from '../support/tcp-forward.js';
import { join } from 'node:path';
import type { Harness } from '../support/harness.js';
import { metaGet } from '../support/meta-get.js';

const skip = controlPlaneSkipReason();

const SERVICE = {
  apiVersion: 'v1',
  kind: 'Service',
  metadata: { name: 'x-tunnel-server-svc', namespace: 'kube-system', labels: { name: 'yurt-tunnel-server' } },
};

describe('the agent finds the tunnel server from x-tunnel-server-svc', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let server: TunnelServer;
  let agentPort: number;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    suite.defer(() => cp.stop());
    const approver = autoApprove(cp, 'yurttunnel-');
    suite.defer(() => approver.stop());
    const dir = await tempDir(suite);
    server = await startClusterServer(suite, cp, dir, { extra: { enableDNSController: false, enableIptables: false } });
    agentPort = server.agentEndpoint.address.port;
    // The cloud node a NodePort Service is reached by.
    await putNode(cp, 'cloud-1', { internalIP: '127.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'false' } });
  });
  after(() => suite.close());

  /** An agent for `node` with no --tunnelserver-addr; its certificate and its cluster reads use the node's kubelet identity. */
  async function discoveringAgent(h: Harness, node: string, log = new MemoryLogger(2)): Promise<{ log: MemoryLogger; metaPort: () => number }> {
    const dir = await tempDir(h);
    const agent = await startTestAgent(h, server, {
      nodeName: node,
      tunnelServerAddr: '',
      certDir: join(dir, 'pki'),
      kubeSource: { kind: 'kubeconfig', path: await kubeletKubeconfig(cp, node) },
      metaPort: 0,
      logger: log,
    });
    return { log, metaPort: () => agent.meta!.address.port };
  }

  async function putService(spec: object, annotations?: Record<string, string>): Promise<void> {
    await deleteObject(cp, 'service', 'x-tunnel-server-svc', 'kube-system');
    const metadata = { ...SERVICE.metadata, ...(annotations ? { annotations } : {}) };
    const r = await cp.kubectl(['create', '-f', '-'], { input: JSON.stringify({ ...SERVICE, metadata, spec }) });
    assert.equal(r.code, 0, r.stderr);
  }

  const registered = (node: string): boolean => server.tunnel.registry.all().some((b) => b.agentID === node);
  const found = (log: MemoryLogger): string | undefined => log.find('tunnel server address found')[0]?.fields.address as string | undefined;

  test("NodePort: a cloud node's InternalIP on the nodePort", async (t) => {
    const h = harness(t, { leakCheck: false });
    await putService({ type: 'NodePort', selector: { 'k8s-app': 'yurt-tunnel-server' }, ports: [{ name: 'tcp', port: 10262, targetPort: 10262 }] });
    const nodePort = Number((await cp.kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-svc', '-o', 'jsonpath={.spec.ports[0].nodePort}'])).stdout);
    assert.ok(nodePort >= 30000 && nodePort <= 32767, `nodePort ${nodePort}`);
    // kube-proxy's part: the node port forwards to the server (a relay listening on 127.0.0.1:<nodePort>).
    const relay = await startTcpForward(h, agentPort, nodePort);
    const { log } = await discoveringAgent(h, 'edge-np');
    await waitFor('agent edge-np to register', () => registered('edge-np'), 30_000);
    assert.ok(relay.connections() >= 1, 'the agent came through the node port');
    assert.equal(found(log), `127.0.0.1:${nodePort}`);
    assert.match(String(log.find('tunnel server address found')[0]!.fields.from), /NodePort Service kube-system\/x-tunnel-server-svc on cloud node cloud-1/);
  });

  test('LoadBalancer: the ingress address from the Service status, on the tcp port', async (t) => {
    const h = harness(t, { leakCheck: false });
    await putService({ type: 'LoadBalancer', selector: { 'k8s-app': 'yurt-tunnel-server' }, ports: [{ name: 'tcp', port: agentPort, targetPort: 10262 }] });
    const patched = await cp.kubectl([
      'patch',
      'svc',
      'x-tunnel-server-svc',
      '-n',
      'kube-system',
      '--subresource=status',
      '--type=merge',
      '-p',
      JSON.stringify({ status: { loadBalancer: { ingress: [{ ip: '127.0.0.1' }] } } }),
    ]);
    assert.equal(patched.code, 0, patched.stderr);
    const { log } = await discoveringAgent(h, 'edge-lb');
    await waitFor('agent edge-lb to register', () => registered('edge-lb'), 30_000);
    assert.equal(found(log), `127.0.0.1:${agentPort}`);
  });

  test('ClusterIP with the x-tunnel-server-external-addr annotation: its host and its port (not the Service port)', async (t) => {
    const h = harness(t, { leakCheck: false });
    await putService(
      { type: 'ClusterIP', selector: { 'k8s-app': 'yurt-tunnel-server' }, ports: [{ name: 'tcp', port: 10262, targetPort: 10262 }] },
      { 'x-tunnel-server-external-addr': `127.0.0.1:${agentPort}` },
    );
    const { log } = await discoveringAgent(h, 'edge-ann');
    await waitFor('agent edge-ann to register', () => registered('edge-ann'), 30_000);
    assert.equal(found(log), `127.0.0.1:${agentPort}`);
  });

  test('ClusterIP only: a message naming the Service and what to set, readyz says it, and the agent keeps trying until the Service is fixed', async (t) => {
    const h = harness(t, { leakCheck: false });
    await putService({ type: 'ClusterIP', selector: { 'k8s-app': 'yurt-tunnel-server' }, ports: [{ name: 'tcp', port: 10262, targetPort: 10262 }] });
    const clusterIP = (await cp.kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-svc', '-o', 'jsonpath={.spec.clusterIP}'])).stdout;
    const { log, metaPort } = await discoveringAgent(h, 'edge-cip');
    await waitFor('the warning', () => log.find('no tunnel server address yet').length > 0, 20_000);
    const warning = log.find('no tunnel server address yet')[0]!;
    assert.equal(
      warning.message,
      `no tunnel server address yet: Service kube-system/x-tunnel-server-svc is a ClusterIP Service (${clusterIP}), which edge nodes cannot reach, ` +
        "and has no x-tunnel-server-external-addr annotation: annotate the Service with the address edge nodes reach the server's agent port by " +
        '(kubectl -n kube-system annotate service x-tunnel-server-svc x-tunnel-server-external-addr=<host>:<port>), make it a NodePort or ' +
        'LoadBalancer Service, or start the agent with --tunnelserver-addr=<host>:<port>',
    );
    assert.equal(warning.fields.apiServer, cp.url);
    const readyz = await metaGet(metaPort(), '/readyz?verbose');
    assert.equal(readyz.status, 503);
    assert.match(readyz.body, /no tunnel server address yet: Service kube-system\/x-tunnel-server-svc is a ClusterIP Service/);
    // The ClusterIP is never dialled; the reads go on until the Service is fixed.
    assert.equal(log.find('could not connect to the tunnel server').length, 0);
    assert.ok(!registered('edge-cip'));
    const annotated = await cp.kubectl(['annotate', 'svc', '-n', 'kube-system', 'x-tunnel-server-svc', `x-tunnel-server-external-addr=127.0.0.1:${agentPort}`]);
    assert.equal(annotated.code, 0, annotated.stderr);
    await waitFor('agent edge-cip to register once the Service is annotated', () => registered('edge-cip'), 30_000);
    assert.equal(found(log), `127.0.0.1:${agentPort}`);
  });

  test('no Service at all: the message says so', async (t) => {
    const h = harness(t, { leakCheck: false });
    await deleteObject(cp, 'service', 'x-tunnel-server-svc', 'kube-system');
    const { log } = await discoveringAgent(h, 'edge-none');
    await waitFor('the warning', () => log.find('no tunnel server address yet').length > 0, 20_000);
    assert.match(log.find('no tunnel server address yet')[0]!.message, /Service kube-system\/x-tunnel-server-svc does not exist/);
  });
});
