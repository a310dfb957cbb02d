// The start-up rehearsal (pkg/grpc/data-path-rehearsal.ts): with
// --startup-rehearsal the server and the agent drive their data path privately
// before they report ready. The CLIs leave it off by default (it costs seconds
// from start to ready). It must leave nothing behind (no socket, timer, temp
// folder; stop() still frees all), show in no metric, listing or agent status,
// and a rehearsal that fails must only be logged.

import assert from 'node:assert/strict';
import { readdir } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { test } from 'node:test';
import { startLocalTunnel } from '../../hack/local-tunnel.js';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { runStartupRehearsal, REHEARSAL_PASSES, SHORT_PASS_DONE } from '../../pkg/grpc/data-path-rehearsal.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { rehearseServer } from '../../pkg/server/rehearsal.js';
import { rehearseAgent } from '../../pkg/agent/rehearsal.js';
import { Registry } from '../../pkg/metrics/prom.js';
import { startTestAgent } from '../support/cluster.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger, type LogRecord } from '../support/memory-logger.js';
import { testServerOptions } from '../support/server-options.js';
import { connectVia, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';

const DONE = 'start-up rehearsal of the data path done';
const FAILED = 'start-up rehearsal of the data path failed; starting anyway (the first connections will be slower)';

function get(port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      let body = '';
      res.setEncoding('latin1');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve(body));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Samples of counters about connections, dials, packets or bytes that are not zero. */
function trafficSamples(metrics: string): string[] {
  return metrics
    .split('\n')
    .filter((l) => !l.startsWith('#') && /(dial|connection|packet|bytes)[a-z_]*_total(\{| )/.test(l) && Number(l.slice(l.lastIndexOf(' ') + 1)) !== 0);
}

/** TMPDIR for this test (the server's rehearsal makes its socket folder there). */
function withTmpdir(h: Harness, dir: string): void {
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = dir;
  h.defer(() => {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  });
}

async function startPair(h: Harness, rehearsal: boolean, tmp?: string) {
  const dir = await tempDir(h);
  if (tmp !== undefined) withTmpdir(h, tmp);
  const serverLog = new MemoryLogger(2);
  const server = await TunnelServer.start(testServerOptions(dir, { metaPort: 0, logger: serverLog, startupRehearsal: rehearsal }));
  h.defer(() => server.stop());
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'edge-1', outDir: agentDir, nodeIPs: ['127.0.0.1'] });
  const agentLog = new MemoryLogger(2);
  const agent = await startTestAgent(h, server, { nodeName: 'edge-1', certDir: agentDir, metaPort: 0, logger: agentLog, startupRehearsal: rehearsal });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  return { dir, server, agent, serverLog, agentLog };
}

function indexOf(records: readonly LogRecord[], message: string | RegExp): number {
  return records.findIndex((r) => (typeof message === 'string' ? r.message === message : message.test(r.message)));
}

test('server and agent rehearse before they are ready; nothing of it shows in metrics, listings or status, or stays open', async (t) => {
  const h = harness(t);
  const tmp = await tempDir(h);
  const { dir, server, agent, serverLog, agentLog } = await startPair(h, true, tmp);
  const expected = {
    connections: REHEARSAL_PASSES.reduce((n, p) => n + p.connections, 0),
    roundTrips: REHEARSAL_PASSES.reduce((n, p) => n + p.connections * p.roundTrips, 0),
  };
  for (const [who, log, ready] of [
    ['server', serverLog, /^yurt-tunnel-server started$/],
    ['agent', agentLog, /^yurt-tunnel-agent starting$/],
  ] as const) {
    const done = log.records.find((r) => r.message === DONE);
    assert.ok(done !== undefined, `${who}: no "${DONE}" line:\n${log.records.map((r) => r.message).join('\n')}`);
    assert.deepEqual({ connections: done.fields.connections, roundTrips: done.fields.roundTrips }, expected);
    assert.ok(indexOf(log.records, DONE) < indexOf(log.records, ready), `${who}: the rehearsal is logged after the ready line`);
    const short = indexOf(log.records, SHORT_PASS_DONE);
    assert.ok(short >= 0 && short < indexOf(log.records, DONE), `${who}: no "${SHORT_PASS_DONE}" line before the full pass`);
    assert.equal(indexOf(log.records, FAILED), -1);
  }
  // Its temp folder is gone, and the server's tunnel knows one agent and no connection.
  assert.deepEqual(await readdir(tmp), []);
  assert.equal(server.tunnel.registry.agentCount, 1);
  assert.equal(server.tunnel.establishedCount(), 0);
  assert.equal(agent.clients.connCount, 0);
  const serverMeta = server.meta!.address.port;
  const agentMeta = agent.meta!.address.port;
  const agents = JSON.parse(await get(serverMeta, '/debug/agents')) as Array<{ agentID: string }>;
  assert.deepEqual(
    agents.map((a) => a.agentID),
    ['edge-1'],
  );
  assert.deepEqual(JSON.parse(await get(serverMeta, '/debug/connections')), []);
  assert.deepEqual(JSON.parse(await get(agentMeta, '/debug/connections')), []);
  const serverMetrics = await get(serverMeta, '/metrics');
  assert.deepEqual(trafficSamples(serverMetrics), []);
  assert.doesNotMatch(serverMetrics, /rehearsal/);
  assert.deepEqual(trafficSamples(await get(agentMeta, '/metrics')), []);
  assert.equal(serverLog.records.filter((r) => r.message === 'agent connected').length, 1, 'the server logs one agent connected (edge-1), not the rehearsal');
  // The real path works after it.
  const echo = await startEchoServer(h);
  const c = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`);
  assert.equal(c.status, 200);
  c.socket.write('after the rehearsal');
  assert.equal((await readExactly(c.socket, 19, c.rest)).toString(), 'after the rehearsal');
  c.socket.destroy();
  // The harness then stops both and checks that nothing is left open.
});

test('startupRehearsal off: neither process rehearses', async (t) => {
  const h = harness(t);
  const { serverLog, agentLog } = await startPair(h, false);
  for (const log of [serverLog, agentLog]) {
    assert.equal(indexOf(log.records, DONE), -1);
    assert.equal(indexOf(log.records, FAILED), -1);
  }
});

// The CLIs, as users start them: no rehearsal unless the flag asks for it, then both processes rehearse.
for (const flag of [[], ['--startup-rehearsal']]) {
  test(`the CLIs ${flag.length === 0 ? 'do not rehearse by default' : 'rehearse with --startup-rehearsal'}`, { timeout: 60_000 }, async (t) => {
    const h = harness(t);
    const output = { server: '', agent: '' };
    const local = await startLocalTunnel({ serverArgs: flag, agentArgs: flag, onOutput: (who, text) => (output[who] += text) });
    h.defer(() => local.stop());
    for (const who of ['server', 'agent'] as const) {
      assert.equal(output[who].includes(DONE), flag.length > 0, `${who} output:\n${output[who]}`);
    }
  });
}

test('a rehearsal that fails is logged with its cause and the server starts anyway', async (t) => {
  const h = harness(t);
  const tmp = await tempDir(h);
  // The server's rehearsal makes its socket folder under TMPDIR: here, a folder that does not exist.
  const { dir, serverLog, agentLog } = await startPair(h, true, join(tmp, 'missing'));
  const failed = serverLog.records.find((r) => r.message === FAILED);
  assert.ok(failed !== undefined, `no "${FAILED}" line:\n${serverLog.records.map((r) => r.message).join('\n')}`);
  assert.equal(failed.level, 'warn');
  assert.match(String(failed.fields.error), /ENOENT/);
  assert.ok(indexOf(serverLog.records, /^yurt-tunnel-server started$/) > indexOf(serverLog.records, FAILED));
  assert.notEqual(indexOf(agentLog.records, DONE), -1, 'the agent (which needs no temp folder) rehearsed');
  const echo = await startEchoServer(h);
  const c = await connectVia(join(dir, 'proxier.sock'), `127.0.0.1:${echo.port}`);
  assert.equal(c.status, 200);
  c.socket.destroy();
});

test('runStartupRehearsal: each pass in order, a log line between the short pass and the full one, V8 told before and after; a pass that throws is logged as a warning and resolves undefined', async () => {
  const log = new MemoryLogger();
  const steps: unknown[] = [];
  const tiering = { begin: () => steps.push('begin'), end: () => steps.push('end') };
  const r = await runStartupRehearsal(
    log,
    (size) => {
      steps.push(size, log.records.length);
      return Promise.resolve({ ...size, ms: 1 });
    },
    tiering,
  );
  // The full pass starts after the short pass's line is written (the log stream's code is then part of what it optimises).
  assert.deepEqual(steps, ['begin', REHEARSAL_PASSES[0], 0, REHEARSAL_PASSES[1], 1, 'end']);
  assert.deepEqual(
    log.records.map((x) => x.message),
    [SHORT_PASS_DONE, DONE],
  );
  assert.equal(
    r?.connections,
    REHEARSAL_PASSES.reduce((n, p) => n + p.connections, 0),
  );
  const failing = new MemoryLogger();
  const failSteps: string[] = [];
  const none = await runStartupRehearsal(failing, () => Promise.reject(new Error('echo target refused')), {
    begin: () => failSteps.push('begin'),
    end: () => failSteps.push('end'),
  });
  assert.equal(none, undefined);
  assert.deepEqual(failSteps, ['begin', 'end'], 'V8 gets its setting back after a failed pass too');
  assert.deepEqual(
    failing.records.map((x) => [x.level, x.message, x.fields.error]),
    [['warn', FAILED, 'echo target refused']],
  );
});

// A broken rehearsal is only a warning at start-up, so each variant is driven here directly, where a failure throws.
for (const resumeWindowMs of [0, 10_000]) {
  test(`the server's and the agent's rehearsals each finish, session resume ${resumeWindowMs > 0 ? 'on' : 'off'}, and leave nothing open`, async (t) => {
    harness(t);
    const size = { connections: 2, roundTrips: 20 };
    const server = await rehearseServer({ ...size, strategies: ['default'], resumeWindowMs });
    assert.deepEqual({ connections: server.connections, roundTrips: server.roundTrips }, size);
    const agent = await rehearseAgent({ ...size, resumeWindowMs });
    assert.deepEqual({ connections: agent.connections, roundTrips: agent.roundTrips }, size);
  });
}

/** The packet types counted in `segment` (Konnectivity's `*_stream_packets_total`), from a registry's text. */
async function packetTypes(registry: InstanceType<typeof Registry>, segment: string): Promise<string[]> {
  const text = await registry.metrics();
  const types = new Set<string>();
  for (const m of text.matchAll(/_stream_packets_total\{packet_type="([A-Z_]+)",segment="([a-z_]+)"\} ([0-9]+)/g)) {
    const [, type, seg, count] = m;
    if (type !== undefined && seg === segment && Number(count) > 0) types.add(type);
  }
  return [...types].sort();
}

// The first real connection used to throw away the packet handlers' optimised code ('wrong map' in the
// server's handlePacket, 'insufficient type feedback' in the agent's onPacket): the rehearsal ended every
// connection from the caller's side, so the agent never sent CLOSE_WRITE nor got CLOSE_REQ, of object shapes
// (type, connectID) of their own, and a target that closes first (as most do) sent them at once.
test("each rehearsal ends connections from both sides, so its half receives every close packet a real connection's end brings", async (t) => {
  harness(t);
  const size = { connections: 2, roundTrips: 5 };
  const serverRegistry = new Registry();
  await rehearseServer({ ...size, strategies: ['default'], resumeWindowMs: 10_000, metricsRegistry: serverRegistry });
  assert.deepEqual(await packetTypes(serverRegistry, 'from_agent'), ['CLOSE_RSP', 'CLOSE_WRITE', 'DATA', 'DIAL_RSP']);
  const agentRegistry = new Registry();
  await rehearseAgent({ ...size, resumeWindowMs: 10_000, metricsRegistry: agentRegistry });
  assert.deepEqual(await packetTypes(agentRegistry, 'to_agent'), ['CLOSE_REQ', 'CLOSE_WRITE', 'DATA', 'DIAL_REQ']);
});
