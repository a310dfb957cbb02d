// The server-wide resume memory budget (--resume-memory-budget,
// pkg/mux/resume-budget.ts) against agents that never acknowledge what the
// server sends them, over real mutual-TLS gRPC calls, with cloud callers
// uploading through the CONNECT proxier: what all links keep together stays
// within the budget (plus one packet per writer), the callers' writes wait
// instead, live links are never expired for it, and when it is spent the
// oldest suspended session holding some is expired early
// (YT_ERR_RESUME_BUDGET), which lets the others go on.

import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { MAX_DATA_PAYLOAD } from '../../pkg/mux/packet-conn.js';
import { CONN_WINDOW_HEADER } from '../../pkg/protocol/flow-control.js';
import { HALF_CLOSE_HEADER } from '../../pkg/protocol/half-close.js';
import { RESUME_HEADER } from '../../pkg/protocol/resume.js';
import type { Backend } from '../../pkg/tunnel/backend.js';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, startServer, waitFor, waitForSteady, type TestServer } from '../support/tunnel.js';
import { scriptedAgent, type ScriptedAgent } from '../support/upstream.js';

const MiB = 1024 * 1024;
const BUDGET = 4 * MiB;
const CHUNK = 64 * 1024;
const LIMIT = { timeout: 60_000 };

interface SilentAgent extends ScriptedAgent {
  /** Its connection is reset (a blip): the call drops without a goodbye. */
  drop(): Promise<void>;
}

/**
 * An agent that announces session resume (with flow control, a 64 MiB window
 * per connection, and half-close, which resume needs) but never acknowledges:
 * it answers the dial and takes every packet, and sends nothing else (an
 * acknowledgement rides on WINDOW_UPDATE, which it never sends). It reaches
 * the server through a relay of its own, which can reset its connection.
 */
async function silentAgent(h: Harness, server: TestServer, name: string): Promise<SilentAgent> {
  const pki = testPKI();
  const relay = await startBlipRelay(h, [server.endpoint.address.port]);
  const agent = scriptedAgent(h, `127.0.0.1:${relay.port}`, {
    metadata: [
      ['agentid', name],
      ['agentidentifiers', `host=${name}`],
      [CONN_WINDOW_HEADER, String(64 * MiB)],
      [HALF_CLOSE_HEADER, '1'],
      [RESUME_HEADER, '30000'],
    ],
    tls: { ca: pki.ca.cert, ...pki.agent(name, `host=${name}`) },
  });
  return { ...agent, drop: () => relay.blip('reset', 50) };
}

interface Upload {
  socket: Socket;
  /** Bytes the caller's socket has taken from it (write() calls). */
  written: number;
  closed: boolean;
}

/** A caller through `agent`: dials `name:80`, the agent answers, then the caller uploads up to `total` bytes with back-pressure. */
async function upload(h: Harness, server: TestServer, agent: ScriptedAgent, name: string, total = Infinity): Promise<Upload> {
  const dialing = connectVia(server.udsPath, `${name}:80`);
  const req = await agent.next();
  assert.equal(req.type, 'DIAL_REQ');
  agent.call.write({ type: 'DIAL_RSP', dialResponse: { error: '', connectID: '1', random: req.dialRequest!.random } });
  const res = await dialing;
  assert.equal(res.status, 200, res.head);
  const up: Upload = { socket: res.socket, written: 0, closed: false };
  h.defer(() => res.socket.destroy());
  res.socket.on('error', () => {});
  res.socket.on('close', () => (up.closed = true));
  const block = Buffer.alloc(CHUNK, 0x5a);
  const go = (): void => {
    while (!res.socket.destroyed && up.written < total) {
      const n = Math.min(CHUNK, total - up.written);
      up.written += n;
      if (!res.socket.write(n === CHUNK ? block : block.subarray(0, n))) {
        res.socket.once('drain', go);
        return;
      }
    }
  };
  go();
  return up;
}

function backendOf(server: TestServer, name: string): Backend {
  const [b] = server.tunnel.registry.streamsOf(name);
  assert.ok(b !== undefined, `agent ${name} has a link`);
  return b;
}

/** DATA the server keeps unacknowledged for `name`'s link. */
function held(server: TestServer, name: string): number {
  return server.tunnel.registry.streamsOf(name)[0]?.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
}

/** What every link keeps, read from the links themselves, sampled every few ms while the test runs: the highest seen. */
function sampleHeld(h: Harness, server: TestServer): { max: number } {
  const seen = { max: 0 };
  const timer = setInterval(() => {
    let sum = 0;
    for (const b of server.tunnel.registry.all()) sum += b.sessionLink?.resumable.unacknowledged.dataBytes ?? 0;
    seen.max = Math.max(seen.max, sum);
  }, 2);
  h.defer(() => clearInterval(timer));
  return seen;
}

async function metricsText(server: TestServer): Promise<string> {
  return server.tunnel.metrics.registry.metrics();
}

test(
  'agents that never acknowledge: all links together keep at most the budget, callers wait, none is expired while live; a dropped one is, and the rest go on',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const server = await startServer(h, { tunnel: { resumeMemoryBudget: BUDGET }, endpoint: { resumeWindowMs: 30_000 } });
    const names = ['edge-a', 'edge-b', 'edge-c'];
    const agents = await Promise.all(names.map((n) => silentAgent(h, server, n)));
    await waitFor('three agents', () => server.tunnel.registry.agentCount === 3);
    assert.equal(server.tunnel.sessions.size, 3, 'every link negotiated session resume');
    const sampled = sampleHeld(h, server);
    const ups: Upload[] = [];
    for (let i = 0; i < 3; i++) ups.push(await upload(h, server, agents[i]!, names[i]!));

    // Every caller's upload stops: the budget is spent and each link's writer waits, far below the 32 MiB per-link cap.
    await waitForSteady('the uploads to stall', () => ups.reduce((n, u) => n + u.written, 0), 500, 20_000);
    for (const u of ups) assert.equal(u.socket.writableNeedDrain, true, "the caller's write() returned false and it waits for 'drain'");
    for (const n of names) assert.ok(held(server, n) < 2 * MiB, `${n} keeps ${held(server, n)} bytes: the budget, not its own cap, held it`);
    // One packet per writer may pass it: a packet is taken before its writer is told to wait.
    const margin = names.length * MAX_DATA_PAYLOAD;
    assert.ok(sampled.max <= BUDGET + margin, `the links held ${sampled.max} bytes at most`);
    const budget = server.tunnel.sessions.budget;
    assert.ok(budget.exhausted, `the budget is spent (${budget.used} of ${BUDGET} bytes)`);
    assert.ok(budget.peak <= BUDGET + margin, `peak ${budget.peak} bytes`);
    let metrics = await metricsText(server);
    assert.match(metrics, /^yurttunnel_server_resume_memory_budget_bytes 4194304$/m);
    assert.match(metrics, new RegExp(`^yurttunnel_server_resume_memory_bytes ${budget.used}$`, 'm'));
    const waits = /^yurttunnel_server_resume_memory_waits_total (\d+)$/m.exec(metrics);
    assert.ok(waits !== null && Number(waits[1]) >= 1, 'the writers waited for the budget');
    // Live links are never expired for it.
    // Every expiry reason is written from the start (at 0), so that the first one shows in increase().
    assert.match(metrics, /^yurttunnel_server_agent_sessions_expired_total\{reason="YT_ERR_RESUME_BUDGET"\} 0$/m);
    assert.equal(server.tunnel.sessions.suspendedCount, 0);
    const heldByA = held(server, 'edge-a');
    assert.ok(heldByA > 0);
    const othersHeld = (): number => held(server, 'edge-b') + held(server, 'edge-c');
    const othersWritten = (): number => ups[1]!.written + ups[2]!.written;
    const before = { held: othersHeld(), written: othersWritten() };

    // edge-a's call drops without a goodbye: its session is suspended, and, the budget being spent, expired at once.
    const aBackend = backendOf(server, 'edge-a');
    await agents[0]!.drop();
    await waitFor('the budget expiry', async () => /reason="YT_ERR_RESUME_BUDGET"\} 1$/m.test(await metricsText(server)), 10_000);
    assert.equal(aBackend.closed, true);
    await waitFor("edge-a's caller to be closed", () => ups[0]!.closed);
    const expiries = server.log.find('agent session expired; closing its connections');
    assert.equal(expiries.length, 1);
    assert.equal(expiries[0]!.fields.reason, 'YT_ERR_RESUME_BUDGET');
    assert.equal(expiries[0]!.fields.agentID, 'edge-a');
    assert.equal(expiries[0]!.fields.heldBytes, heldByA);

    // What it held is released, and the others' writers go on until the budget is spent again.
    await waitFor('the other uploads to go on', () => othersHeld() >= before.held + heldByA / 2, 10_000);
    await waitForSteady('the uploads to stall again', othersWritten, 500, 20_000);
    assert.ok(othersWritten() > before.written, 'the callers wrote more');
    for (const u of ups.slice(1)) assert.equal(u.socket.writableNeedDrain, true, 'and wait again');
    assert.ok(budget.exhausted);
    assert.ok(budget.peak <= BUDGET + margin, `peak ${budget.peak} bytes`);
    assert.ok(sampled.max <= BUDGET + margin, `the links held ${sampled.max} bytes at most`);
    for (const n of ['edge-b', 'edge-c']) assert.equal(backendOf(server, n).suspended, false, `${n} is live`);
    metrics = await metricsText(server);
    assert.match(metrics, /^yurttunnel_server_agent_sessions_expired_total\{reason="YT_ERR_RESUME_BUDGET"\} 1$/m);
    assert.equal(server.tunnel.sessions.suspendedCount, 0);

    // Everything ends: every byte kept is released, once.
    await server.stop();
    assert.equal(budget.used, 0);
  },
);

test(
  'with suspended sessions keeping memory, a link that needs it expires the oldest suspended one (YT_ERR_RESUME_BUDGET), and only as many as it needs',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const server = await startServer(h, { tunnel: { resumeMemoryBudget: BUDGET }, endpoint: { resumeWindowMs: 30_000 } });
    const a = await silentAgent(h, server, 'edge-a');
    const b = await silentAgent(h, server, 'edge-b');
    await waitFor('two agents', () => server.tunnel.registry.agentCount === 2);
    const part = 1.5 * MiB;
    const upA = await upload(h, server, a, 'edge-a', part);
    const upB = await upload(h, server, b, 'edge-b', part);
    await waitFor('both links to keep what was sent', () => held(server, 'edge-a') === part && held(server, 'edge-b') === part, 10_000);

    // Both drop without a goodbye, edge-a first: suspended, kept (3 MiB of 4).
    const aBackend = backendOf(server, 'edge-a');
    const bBackend = backendOf(server, 'edge-b');
    await a.drop();
    await waitFor('edge-a to be suspended', () => aBackend.suspended);
    await b.drop();
    await waitFor('edge-b to be suspended', () => bBackend.suspended);
    assert.equal(server.tunnel.sessions.suspendedCount, 2);
    assert.equal(held(server, 'edge-a') + held(server, 'edge-b'), 2 * part);

    // A new agent's caller uploads 2 MiB: the budget runs out, and edge-a, suspended longest, is expired for it.
    const c = await silentAgent(h, server, 'edge-c');
    await waitFor('edge-c', () => server.tunnel.registry.streamsOf('edge-c').length === 1);
    const upC = await upload(h, server, c, 'edge-c', 2 * MiB);
    await waitFor("edge-c's upload to be kept whole", () => held(server, 'edge-c') === 2 * MiB, 10_000);
    assert.equal(aBackend.closed, true, 'the oldest suspended session was expired');
    await waitFor("edge-a's caller to be closed", () => upA.closed);
    assert.equal(bBackend.closed, false, 'the next one was not needed');
    assert.equal(bBackend.suspended, true);
    assert.equal(upB.closed, false);
    assert.equal(upC.written, 2 * MiB);
    assert.equal(server.tunnel.sessions.budget.used, part + 2 * MiB, 'what edge-b and edge-c keep');
    const metrics = await metricsText(server);
    assert.match(metrics, /^yurttunnel_server_agent_sessions_expired_total\{reason="YT_ERR_RESUME_BUDGET"\} 1$/m);
    assert.match(metrics, /^yurttunnel_server_agent_sessions_expired_total\{reason="window"\} 0$/m);
    const expiries = server.log.find('agent session expired; closing its connections');
    assert.deepEqual(
      expiries.map((r) => [r.fields.agentID, r.fields.reason, r.fields.heldBytes]),
      [['edge-a', 'YT_ERR_RESUME_BUDGET', part]],
    );
    await server.stop();
    assert.equal(server.tunnel.sessions.budget.used, 0, 'every byte kept is released, once');
  },
);
