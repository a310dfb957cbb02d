// Several servers and no load balancer (issue 37 item 3, Konnectivity #394):
// real server and agent processes, the agents given the three servers'
// addresses in --tunnelserver-addr. Each agent links to all three; one server
// killed, traffic goes on through the others; it comes back, the agents rejoin it.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { fetchAgents } from '../../pkg/meta/agents-status.js';
import { harness, type Harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { roundTrip, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

const NODES = ['edge-1', 'edge-2'];

interface Server {
  id: string;
  port: number;
  udsPath: string;
  proc: Proc;
  metaPort: number;
}

async function startOne(h: Harness, dir: string, id: string, port: number): Promise<Server> {
  const udsPath = join(dir, `${id}.sock`);
  // One --cert-dir: the servers share the local CA that signs the agents' certificates.
  const proc = startProcess(h, SERVER_BIN, [
    ...localServerFlags({ certDir: join(dir, 'pki'), agentPort: port, udsPath }),
    '--server-id',
    id,
    '--server-count',
    '3',
    '--v',
    '2',
  ]);
  const started = await proc.waitForLine(/yurt-tunnel-server started/, 20_000);
  const metaPort = Number(/metaPort=(\d+)/.exec(started)?.[1]);
  assert.ok(metaPort > 0, started);
  return { id, port, udsPath, proc, metaPort };
}

async function agentsOf(s: Server): Promise<string[]> {
  try {
    return (await fetchAgents(`127.0.0.1:${s.metaPort}`, 2000)).map((a) => a.agentID).sort();
  } catch {
    return []; // Not up (yet, or any more).
  }
}

async function holdsEveryNode(s: Server): Promise<boolean> {
  return (await agentsOf(s)).join(',') === NODES.join(',');
}

async function everyNodeThrough(s: Server, echoPort: number): Promise<void> {
  for (const node of NODES) {
    const text = `through ${s.id} to ${node}`;
    assert.equal(await roundTrip(s.udsPath, `127.0.0.1:${echoPort}`, text, { 'X-Tunnel-Proxy-Host': node }), text);
  }
}

test('three servers, no load balancer: every agent holds all three; one killed, the others carry on; back, it is rejoined', { timeout: 120_000 }, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const echo = await startEchoServer(h);
  const ports = [await freeLowPort(), await freeLowPort(), await freeLowPort()];
  // The first creates the CA; the others find it.
  const servers = [await startOne(h, dir, 'server-a', ports[0]!)];
  servers.push(await startOne(h, dir, 'server-b', ports[1]!), await startOne(h, dir, 'server-c', ports[2]!));
  const agentDirs = new Map<string, string>();
  for (const node of NODES) {
    agentDirs.set(node, join(dir, node));
    await issueAgentCertificate(join(dir, 'pki'), node, join(dir, node));
  }
  // Spaces after the commas: the list is trimmed.
  const addresses = ports.map((p) => `127.0.0.1:${p}`).join(', ');
  const agents = NODES.map((node) =>
    startProcess(h, AGENT_BIN, [
      ...localAgentFlags({ nodeName: node, serverPort: ports[0]!, agentDir: agentDirs.get(node)! }),
      '--tunnelserver-addr',
      addresses,
      '--sync-interval',
      '200ms',
      '--sync-interval-cap',
      '1s',
      '--v',
      '2',
    ]),
  );
  for (const s of servers) await waitFor(`${s.id} to hold every agent`, () => holdsEveryNode(s), 20_000);
  for (const s of servers) await everyNodeThrough(s, echo.port);
  for (const a of agents) assert.equal(a.lines.filter((l) => /connected to tunnel server/.test(l)).length, 3, a.lines.join('\n'));

  // Killed without a goodbye: the agents keep dialling it with backoff, and the others carry every node meanwhile.
  const [a, b, c] = servers as [Server, Server, Server];
  b.proc.kill('SIGKILL');
  await b.proc.exited;
  await waitFor(
    'the agents to retry the killed server',
    () => agents.every((x) => x.lines.some((l) => /could not connect to the tunnel server/.test(l))),
    20_000,
  );
  for (let round = 0; round < 3; round++) {
    await everyNodeThrough(a, echo.port);
    await everyNodeThrough(c, echo.port);
  }
  assert.ok(await holdsEveryNode(a));
  assert.ok(await holdsEveryNode(c));

  // Back on its address: every agent links to it again without a restart.
  const back = await startOne(h, dir, 'server-b', ports[1]!);
  await waitFor('the agents to rejoin server-b', () => holdsEveryNode(back), 20_000);
  await everyNodeThrough(back, echo.port);
});
