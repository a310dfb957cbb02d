// The log verbosity changed at run time (issue 38, item 3): PUT /debug/flags/v
// on the real server's and agent's meta ports, as Kubernetes components serve
// it. A line logged only at -v 2 (the access line of a tunnelled connection)
// appears in both processes once it is set to 2 and is gone again at 0. Bad
// bodies get 400 with the range; a caller from another loopback address is
// still on the loopback (the refusal of other callers is unit-tested:
// test/unit/flags-v.test.ts, as tests dial nothing but loopback).

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { harness, type Harness } from '../support/harness.js';
import { metaGet, type MetaRequestOptions } from '../support/meta-get.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { connectVia, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

const LIMIT = { timeout: 60_000 };
const ACCESS_LINE = /connection ended /;

interface Side {
  name: string;
  proc: Proc;
  port: number;
  /** Where its meta port listens: the agent's on another loopback address. */
  at: MetaRequestOptions;
}

async function startPair(h: Harness): Promise<{ server: Side; agent: Side; udsPath: string }> {
  const dir = await tempDir(h);
  const udsPath = join(dir, 'proxier.sock');
  const agentPort = await freeLowPort();
  const server = startProcess(h, SERVER_BIN, [...localServerFlags({ certDir: join(dir, 'pki'), agentPort, udsPath }), '--v', '0']);
  const started = await server.waitForLine(/yurt-tunnel-server started/, 20_000);
  await issueAgentCertificate(join(dir, 'pki'), 'edge-1', join(dir, 'agent'));
  const agentMeta = await freeLowPort();
  const agent = startProcess(h, AGENT_BIN, [
    ...localAgentFlags({ nodeName: 'edge-1', serverPort: agentPort, agentDir: join(dir, 'agent') }),
    ...['--meta-host', '127.0.0.2', '--meta-port', String(agentMeta), '--v', '0'],
  ]);
  await agent.waitForLine(/connected to tunnel server/, 20_000);
  return {
    udsPath,
    server: { name: 'server', proc: server, port: Number(/metaPort=(\d+)/.exec(started)![1]), at: {} },
    // Called from a third loopback address: any of 127.0.0.0/8 is this machine.
    agent: { name: 'agent', proc: agent, port: agentMeta, at: { host: '127.0.0.2', localAddress: '127.0.0.3' } },
  };
}

function setV(side: Side, body: string): Promise<{ status: number; body: string }> {
  return metaGet(side.port, '/debug/flags/v', 'PUT', { ...side.at, body });
}

async function getV(side: Side): Promise<string> {
  const r = await metaGet(side.port, '/debug/flags/v', 'GET', side.at);
  assert.equal(r.status, 200, side.name);
  return r.body;
}

const accessLines = (side: Side): number => side.proc.lines.filter((l) => ACCESS_LINE.test(l)).length;

async function closedCount(side: Side): Promise<number> {
  const m = /^yurttunnel_server_connections_closed_total\{reason="closed"\} (\d+)$/m.exec((await metaGet(side.port, '/metrics')).body);
  return Number(m?.[1] ?? 0);
}

/**
 * One echo through the tunnel, waited for until both ends have let it go: the server
 * counted it closed and the agent lists no connection (each logs its access line, if
 * at all, in the same step).
 */
async function oneConnection(udsPath: string, echoPort: number, server: Side, agent: Side, nth: number): Promise<void> {
  const c = await connectVia(udsPath, `127.0.0.1:${echoPort}`);
  assert.equal(c.status, 200);
  c.socket.write('ping');
  assert.equal((await readExactly(c.socket, 4, c.rest)).toString(), 'ping');
  c.socket.end();
  await waitFor(`the server to count connection ${nth} closed`, async () => (await closedCount(server)) === nth, 10_000);
  await waitFor(
    `the agent to let connection ${nth} go`,
    async () => (await metaGet(agent.port, '/debug/connections', 'GET', agent.at)).body.trim() === '[]',
    10_000,
  );
  c.socket.destroy();
}

test('PUT /debug/flags/v sets -v in the running server and agent: a -v 2 line appears at 2 and is gone at 0', LIMIT, async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server, agent, udsPath } = await startPair(h);
  const both = [server, agent];
  for (const side of both) assert.equal(await getV(side), '0\n', side.name);

  await oneConnection(udsPath, echo.port, server, agent, 1);
  for (const side of both) {
    assert.deepEqual(await setV(side, '2'), { status: 200, body: 'verbosity set to 2 (was 0)\n' }, side.name);
    assert.equal(await getV(side), '2\n', side.name);
    const line = await side.proc.waitForLine(/log verbosity changed/);
    assert.match(line, / from=0 to=2 caller=127\.0\.0\.[13]:\d+$/, side.name);
  }
  await oneConnection(udsPath, echo.port, server, agent, 2);
  for (const side of both) {
    await waitFor(`the ${side.name}'s access line`, () => accessLines(side) === 1);
    assert.match(
      side.proc.lines.find((l) => ACCESS_LINE.test(l))!,
      new RegExp(`dialAddress=127\\.0\\.0\\.1:${echo.port} `),
      side.name,
    );
  }

  for (const side of both) assert.deepEqual(await setV(side, '0\n'), { status: 200, body: 'verbosity set to 0 (was 2)\n' }, side.name);
  await oneConnection(udsPath, echo.port, server, agent, 3);
  // Back to 2 for one more: its line comes, the third connection's never did.
  for (const side of both) assert.equal((await setV(side, ' 2 ')).status, 200, side.name);
  await oneConnection(udsPath, echo.port, server, agent, 4);
  for (const side of both) {
    await waitFor(`the ${side.name}'s second access line`, () => accessLines(side) === 2);
    assert.equal(side.proc.lines.filter((l) => /log verbosity changed/.test(l)).length, 3, side.name);
  }
  // The first and third connections, made at 0, left no access line.
  assert.equal(accessLines(server), 2);
  assert.equal(accessLines(agent), 2);
});

test('PUT /debug/flags/v: a body that is not a level in range gets 400 with the range and changes nothing', LIMIT, async (t) => {
  const h = harness(t);
  const { server, agent } = await startPair(h);
  const bad = ['', 'abc', '-1', '11', '2.5', '1e1', '0x2', '2 3', 'v=2', '9'.repeat(17), 'x'.repeat(100_000)];
  for (const side of [server, agent]) {
    for (const body of bad) {
      const r = await setV(side, body);
      assert.equal(r.status, 400, `${side.name} ${JSON.stringify(body.slice(0, 20))}`);
      assert.equal(r.body, 'the body must be the verbosity, a whole number from 0 to 10 (e.g. curl -X PUT --data 2 …/debug/flags/v)\n');
    }
    assert.equal(await getV(side), '0\n', side.name);
    // Other methods are named with what is allowed.
    const post = await metaGet(side.port, '/debug/flags/v', 'POST', { ...side.at, body: '2' });
    assert.equal(post.status, 405);
    assert.match(post.body, /GET shows the verbosity, PUT sets it/);
    // The refusals are logged rate-limited: at most 5 lines of the kind in 10 s, then a count.
    await side.proc.waitForLine(/refused a change of the log verbosity: not a level/);
    const logged = side.proc.lines.filter((l) => /refused a change of the log verbosity: not a level/.test(l)).length;
    assert.ok(logged >= 1 && logged <= 5, `${side.name} logged ${logged}`);
    // The port still serves.
    assert.equal((await metaGet(side.port, '/healthz', 'GET', side.at)).status, 200);
    assert.equal((await setV(side, '1')).status, 200);
    assert.equal(await getV(side), '1\n', side.name);
  }
});
