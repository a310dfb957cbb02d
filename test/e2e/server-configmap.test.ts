// The server ConfigMap kube-system/yurt-tunnel-server-cfg, live, against a
// real kube-apiserver: created, updated and deleted while the server runs,
// and the master ports follow it without a restart (localhost-proxy-ports,
// and the far end's TLS for ports mapped to the HTTP master port).

import assert from 'node:assert/strict';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { once } from 'node:events';
import { after, before, describe, test } from 'node:test';
import type { TunnelServer } from '../../pkg/server/app.js';
import { controlPlaneSkipReason, type ControlPlane } from '../support/envtest/index.js';
import { suiteHarness } from '../support/harness.js';
import type { MemoryLogger } from '../support/memory-logger.js';
import { startServerConfigRig, type ServerConfigRig } from '../support/server-config-rig.js';

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
  let setConfigMap: ServerConfigRig['setConfigMap'];
  let plainPort: number;
  let metaPort: number;

  before(async () => {
    // A plain HTTP endpoint on the node's address, and one that listens only on the node's loopback (an agent's meta port).
    const plain = await listen(NODE_IP, 'plain http on the node\n');
    suite.defer(() => plain.server.close());
    plainPort = plain.port;
    const meta = await listen('127.0.0.1', 'meta on the node loopback\n');
    suite.defer(() => meta.server.close());
    metaPort = meta.port;
    // The flag's localhost port is the default the ConfigMap overrides and its deletion restores.
    ({ cp, server, log, setConfigMap } = await startServerConfigRig(suite, NODE_IP, { localhostProxyPorts: [metaPort] }));
  });
  after(() => suite.close());

  /** GET /metrics through a master port to the node's port `port`; over TLS, as kube-apiserver calls, on the secure one. */
  async function call(master: 'secure' | 'insecure', port: number): Promise<Answer> {
    const options = { host: '127.0.0.1', port: server.master.address(master).port, path: '/metrics', headers: { Host: `edge-1:${port}` }, agent: false };
    const tls = { ca: cp.pki.ca.cert, cert: cp.pki.kubeletClient.cert, key: cp.pki.kubeletClient.key, servername: '' };
    const req = master === 'insecure' ? httpRequest(options) : httpsRequest({ ...options, ...tls });
    req.end();
    const [res] = (await once(req, 'response')) as [IncomingMessage];
    let body = '';
    for await (const c of res) body += String(c);
    return { status: res.statusCode, body };
  }
  /** To the node's port `metaPort`, reached only as a localhost-proxy port. */
  const loopbackCall = (): Promise<Answer> => call('insecure', metaPort);
  /** To the node's plain HTTP port. */
  const plainCall = (): Promise<Answer> => call('secure', plainPort);

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
