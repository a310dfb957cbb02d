// The server ConfigMap kube-system/yurt-tunnel-server-cfg, live, against a
// real kube-apiserver: created, updated and deleted while the server runs,
// and the master ports follow it without a restart (localhost-proxy-ports,
// and the far end's TLS for ports mapped to the HTTP master port).

import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import type { ServerConfig } from '../../pkg/kube/server-config.js';
import type { TunnelServer } from '../../pkg/server/app.js';
import { kubeletKubeconfig, startClusterServer, startTestAgent } from '../support/cluster.js';
import { autoApprove, controlPlaneSkipReason, deleteObject, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { suiteHarness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { waitFor } from '../support/tunnel.js';

const skip = controlPlaneSkipReason();

const NODE_IP = '127.0.0.2';

async function listen(host: string, body: string): Promise<{ server: Server; port: number }> {
  const server = createServer((_req, res) => res.end(body));
  server.listen(0, host);
  await once(server, 'listening');
  return { server, port: (server.address() as { port: number }).port };
}

interface Answer {
  status: number | undefined;
  body: string;
}

describe('server ConfigMap, live', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let server: TunnelServer;
  let log: MemoryLogger;
  let plainPort: number;
  let metaPort: number;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    suite.defer(() => cp.stop());
    const approver = autoApprove(cp, 'yurttunnel-');
    suite.defer(() => approver.stop());
    const dir = await mkdtemp(join(tmpdir(), 'yt-servercfg-'));
    suite.defer(() => rm(dir, { recursive: true, force: true }));
    // A plain HTTP endpoint on the node's address, and one that listens only on the node's loopback (an agent's meta port).
    const plain = await listen(NODE_IP, 'plain http on the node\n');
    suite.defer(() => plain.server.close());
    plainPort = plain.port;
    const meta = await listen('127.0.0.1', 'meta on the node loopback\n');
    suite.defer(() => meta.server.close());
    metaPort = meta.port;
    await putNode(cp, 'edge-1', { internalIP: NODE_IP, kubeletPort: 10250 });
    log = new MemoryLogger(2);
    // The flag's localhost port is the default the ConfigMap overrides and its deletion restores.
    server = await startClusterServer(suite, cp, dir, { log, extra: { localhostProxyPorts: [metaPort] } });
    await startTestAgent(suite, server, {
      nodeName: 'edge-1',
      nodeIP: NODE_IP,
      certDir: join(dir, 'agent-pki'),
      kubeSource: { kind: 'kubeconfig', path: await kubeletKubeconfig(cp, 'edge-1') },
    });
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
    await server.cluster!.config.waitForSync();
  });
  after(() => suite.close());

  /** Through the insecure master port to the node's port `metaPort` (reached only as a localhost-proxy port). */
  async function loopbackCall(): Promise<Answer> {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.master.address('insecure').port,
      path: '/metrics',
      headers: { Host: `edge-1:${metaPort}` },
      agent: false,
    });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const c of res) body += String(c);
    return { status: res.statusCode, body };
  }

  /** Through the secure master port, as kube-apiserver calls, to the node's plain HTTP port. */
  async function plainCall(): Promise<Answer> {
    const req = httpsRequest({
      host: '127.0.0.1',
      port: server.master.address('secure').port,
      path: '/metrics',
      headers: { Host: `edge-1:${plainPort}` },
      ca: cp.pki.ca.cert,
      cert: cp.pki.kubeletClient.cert,
      key: cp.pki.kubeletClient.key,
      servername: '',
      agent: false,
    });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const c of res) body += String(c);
    return { status: res.statusCode, body };
  }

  /** Applies the ConfigMap (or deletes it, for undefined) and waits for the server to take the change. */
  async function setConfigMap(data: Record<string, string> | undefined): Promise<ServerConfig> {
    const changed = new Promise<ServerConfig>((resolve) => {
      const off = server.cluster!.config.subscribe((now) => {
        off();
        resolve(now);
      });
    });
    if (data === undefined) await deleteObject(cp, 'configmap', 'yurt-tunnel-server-cfg', 'kube-system');
    else await cp.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'yurt-tunnel-server-cfg', namespace: 'kube-system' }, data });
    return changed;
  }

  test('created, updated, deleted: the master ports follow it without a restart', async () => {
    // No ConfigMap: the flag's localhost port reaches the node's loopback; the plain port gets TLS (the caller came over TLS) and fails.
    assert.deepEqual(await loopbackCall(), { status: 200, body: 'meta on the node loopback\n' });
    assert.equal((await plainCall()).status, 502);

    // Created: no localhost ports; a bad entry is skipped, named, and the rest applies.
    let config = await setConfigMap({ 'localhost-proxy-ports': '', 'http-proxy-ports': 'bogus' });
    assert.deepEqual([...config.localhostProxyPorts], []);
    assert.equal((await loopbackCall()).status, 502, 'the node address has nothing on that port');
    assert.equal((await plainCall()).status, 502);
    assert.equal(
      log.find('server ConfigMap entry skipped').filter((r) => r.fields.problem === 'http-proxy-ports: "bogus" is not a port (1-65535); skipped').length,
      1,
    );

    // Updated: the plain port is an http-proxy port, so the far end is plain HTTP.
    config = await setConfigMap({ 'localhost-proxy-ports': '', 'http-proxy-ports': `bogus,${plainPort}` });
    assert.deepEqual([...config.proxyPorts], [[plainPort, 'insecure']]);
    assert.deepEqual(await plainCall(), { status: 200, body: 'plain http on the node\n' });
    assert.equal((await loopbackCall()).status, 502);

    // Deleted: back to the defaults (OpenYurt keeps the last value).
    config = await setConfigMap(undefined);
    assert.deepEqual([...config.proxyPorts], []);
    assert.deepEqual([...config.localhostProxyPorts], [metaPort]);
    assert.deepEqual(await loopbackCall(), { status: 200, body: 'meta on the node loopback\n' });
    assert.equal((await plainCall()).status, 502);
    assert.equal(log.find('server ConfigMap deleted: back to the defaults').length, 1);
  });
});
