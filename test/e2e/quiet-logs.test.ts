// Logs that tell the truth at the default -v 0: the agent's probe of a server
// it already holds is not a connection event on that server (a new server
// found by a probe is), and an agent whose server stays down says so a few
// times a minute, not every few seconds.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { RETRY_LOG_LIMIT } from '../../pkg/agent/client-set.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { startAgent, startRoundRobin, startServer, waitFor } from '../support/tunnel.js';

const DUPLICATE = 'already connected to this server; closing the duplicate link';
const RETRY = 'could not connect to the tunnel server; will retry';

test('at -v 0 a server logs an agent coming once, not each probe of a server it already holds; a server found by a probe is logged', async (t) => {
  const h = harness(t);
  const logs = [new MemoryLogger(0), new MemoryLogger(0)];
  // servercount 1: the agent holds one link, so every later dial is a probe; the round robin lands each on either server.
  const servers = [
    await startServer(h, { serverID: 'server-a', tunnel: { logger: logs[0] } }),
    await startServer(h, { serverID: 'server-b', tunnel: { logger: logs[1] } }),
  ];
  const lbPort = await startRoundRobin(
    h,
    servers.map((s) => s.endpoint.address.port),
  );
  const agentLog = new MemoryLogger(2);
  const agent = startAgent(h, `127.0.0.1:${lbPort}`, { nodeName: 'edge-1', connection: { serverName: 'localhost' }, probeIntervalMs: 50, logger: agentLog });
  await waitFor('the agent to hold both servers', () => agent.clients.connectedServers === 2, 10_000);
  await waitFor('six probes that reached a server the agent holds', () => agentLog.find(DUPLICATE).length >= 6, 10_000);
  // The last duplicate's end may still be on its way to the server.
  await waitFor('no duplicate stream left on either server', () => servers.every((s) => s.tunnel.registry.streamsOf('edge-1').length === 1), 5000);
  for (const [i, log] of logs.entries()) {
    assert.equal(log.find('agent connected').length, 1, `server ${i}: one "agent connected" (the first link, or the probe that found it)`);
    assert.equal(log.find('agent disconnected').length, 0, `server ${i}: the duplicates' ends are not logged at -v 0`);
  }
});

test('at -v 2 the probe of a held server is still logged, marked as a probe', async (t) => {
  const h = harness(t);
  const log = new MemoryLogger(2);
  const server = await startServer(h, { tunnel: { logger: log } });
  const agentLog = new MemoryLogger(2);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { serverName: 'localhost' }, probeIntervalMs: 50, logger: agentLog });
  await waitFor('three probes', () => agentLog.find(DUPLICATE).length >= 3, 10_000);
  await waitFor('the probes to end on the server', () => log.find('agent disconnected').length >= 3, 5000);
  const connected = log.find('agent connected');
  assert.equal(connected[0]!.fields.probe, undefined, 'the first link is no probe');
  assert.ok(connected.length >= 4);
  assert.ok(connected.slice(1).every((r) => r.fields.probe === true));
  assert.ok(log.find('agent disconnected').every((r) => r.fields.probe === true && r.fields.ended === 'left'));
});

test('an agent whose server stays down writes a few retry warnings and then one line counting the rest', async (t) => {
  const h = harness(t);
  // A "server" that closes every connection at once: each dial fails, and is counted here.
  let attempts = 0;
  const refuser = createServer((s) => {
    attempts++;
    s.destroy();
  });
  refuser.listen(0, '127.0.0.1');
  await once(refuser, 'listening');
  h.defer(() => new Promise((r) => refuser.close(r)));
  const log = new MemoryLogger(0);
  const agent = startAgent(h, `127.0.0.1:${(refuser.address() as AddressInfo).port}`, { nodeName: 'edge-1', syncIntervalMs: 5, logger: log });
  const failures = 12;
  await waitFor(`${failures} failed dials`, () => attempts >= failures, 20_000);
  await agent.stop();
  const written = log.records.filter((r) => r.message === RETRY);
  assert.equal(written.length, RETRY_LOG_LIMIT.burst, 'only the first few failures are written');
  const summary = log.records.filter((r) => r.message.startsWith(`${RETRY} (`));
  assert.equal(summary.length, 1, 'one summary line at stop');
  assert.match(summary[0]!.message, /\(\d+ more like this in 60 s not logged\)$/);
  // Every failed dial is either written or counted in the summary (the last may have been cut short by the stop).
  const leftOut = summary[0]!.fields.leftOut as number;
  assert.ok(written.length + leftOut >= failures - 1, `${written.length} written + ${leftOut} left out, ${attempts} dials`);
  assert.equal(summary[0]!.level, 'warn');
});
