// Several servers behind one address, and the proxier's Unix socket file.

import assert from 'node:assert/strict';
import { stat, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { test } from 'node:test';
import { HttpConnectServer } from '../../pkg/frontend/http-connect.js';
import { Tunnel } from '../../pkg/tunnel/tunnel.js';
import { harness } from '../support/harness.js';
import { startAgent, startRoundRobin, startServer, tempDir, waitFor } from '../support/tunnel.js';

test('behind a load balancer the agent keeps dialling until it holds servercount distinct servers', async (t) => {
  const h = harness(t);
  const a = await startServer(h, { serverID: 'server-a', endpoint: { serverCount: 2 } });
  const b = await startServer(h, { serverID: 'server-b', endpoint: { serverCount: 2 } });
  const lbPort = await startRoundRobin(h, [a.endpoint.address.port, a.endpoint.address.port, b.endpoint.address.port]);
  const agent = startAgent(h, `127.0.0.1:${lbPort}`, { nodeName: 'edge-1', connection: { serverName: 'localhost' } });
  await waitFor('links to both servers', () => agent.clients.connectedServers === 2, 10_000);
  assert.deepEqual(agent.clients.serverIDs.sort(), ['server-a', 'server-b']);
  assert.equal(a.tunnel.registry.agentCount, 1);
  assert.equal(b.tunnel.registry.agentCount, 1);
  assert.ok(agent.log.find('already connected to this server').length >= 1, 'the duplicate link to server-a was closed');
  // Losing one server: the agent keeps the other and tries to get back to two.
  await b.stop();
  await waitFor('the agent to notice', () => agent.clients.connectedServers === 1);
  assert.deepEqual(agent.clients.serverIDs, ['server-a']);
});

test('the proxier replaces a stale socket file, refuses any other file, and makes the socket 0660', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const tunnel = new Tunnel();
  h.defer(() => tunnel.close());

  // A socket file left behind by a process that was killed.
  const stalePath = join(dir, 'stale.sock');
  const crashed = spawn(process.execPath, ['-e', `require('net').createServer().listen(${JSON.stringify(stalePath)}, () => console.log('up'))`]);
  await once(crashed.stdout, 'data');
  crashed.kill('SIGKILL');
  await once(crashed, 'exit');
  assert.ok((await stat(stalePath)).isSocket(), 'the dead process left its socket file');
  const proxier = new HttpConnectServer(tunnel, { path: stalePath });
  h.defer(() => proxier.close());
  await proxier.start();
  assert.equal((await stat(stalePath)).mode & 0o777, 0o660);

  const filePath = join(dir, 'not-a-socket');
  await writeFile(filePath, 'precious');
  const refused = new HttpConnectServer(tunnel, { path: filePath });
  await assert.rejects(refused.start(), {
    message: `${filePath} exists and is not a socket; refusing to replace it (remove it or choose another path)`,
  });
  await refused.close();
});

test('an agent holding servercount servers probes only once per probe interval, not right after connecting', async (t) => {
  const h = harness(t);
  const a = await startServer(h, { serverID: 'server-a' });
  const agent = startAgent(h, a.agentAddress, { nodeName: 'edge-1', connection: { serverName: 'localhost' }, syncIntervalMs: 50, probeIntervalMs: 1500 });
  await waitFor('the link', () => agent.clients.connectedServers === 1);
  await waitFor('the first probe', () => agent.log.find('already connected to this server').length >= 1);
  const linked = agent.log.find('connected to tunnel server')[0]!.at;
  const probed = agent.log.find('already connected to this server')[0]!.at;
  // Logged times: the probe's dial starts a whole interval after the link (1 ms for the clocks' rounding).
  assert.ok(probed - linked >= 1500 - 1, `the first probe came ${Math.round(probed - linked)} ms after the link, within the 1500 ms interval`);
});
