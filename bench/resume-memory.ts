// What session resume keeps in memory at its worst: one agent link with N busy
// connections (default 100), each streaming both ways at full speed, whose
// path goes dark (nothing delivered, nothing acknowledged) and then drops. The
// figure is what each end's ResendBuffer holds unacknowledged (exact, from the
// link) and how much the process's Buffer memory grew (approximate: server,
// agent, relay, callers and targets share this process).
//
//   npm run bench -- resume-memory [--connections N]   (the npm script runs node with --expose-gc)
//
// Phases: linked and busy (the highest count sampled every 10 ms over 2 s);
// the path frozen (a silent blip: writers go on until flow control and the
// transport stop them; the agent notices by its liveness check and
// suspends); healed and resumed; then a reset blip (both ends suspend at once:
// what was in flight stays kept, and each held writer adds at most the packet
// it was sending).

import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerConnection } from '../pkg/agent/server-connection.js';
import type { ResumableLink } from '../pkg/mux/resumable-link.js';
import { DEFAULT_MAX_DATA_BYTES } from '../pkg/mux/resend-buffer.js';
import { DEFAULT_CONN_WINDOW } from '../pkg/protocol/flow-control.js';
import { startBlipRelay } from '../test/support/blip-relay.js';
import { suiteHarness } from '../test/support/harness.js';
import { connectVia, startAgent, startServer, startTCPServer, waitFor, waitForSteady } from '../test/support/tunnel.js';
import { num, type Scenario } from './options.js';
import { formatTable } from './report.js';

const MiB = 1024 * 1024;
const CHUNK = 64 * 1024;
const WINDOW_MS = 8000;

/** Writes `block` to `s` for as long as it is open, with back-pressure; reads and drops what arrives. */
function busy(s: Socket): void {
  const block = Buffer.alloc(CHUNK, 0x5a);
  s.on('error', () => {});
  s.on('data', () => {});
  s.resume();
  const go = (): void => {
    while (!s.destroyed && s.write(block));
    if (!s.destroyed) s.once('drain', go);
  };
  go();
}

function gcNow(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

function buffersMiB(): number {
  gcNow();
  return process.memoryUsage().arrayBuffers / MiB;
}

const mib = (n: number): string => (n / MiB).toFixed(1);

export const resumeMemoryScenario: Scenario = {
  name: 'resume-memory',
  summary: 'what session resume keeps per agent link with 100 busy connections whose path goes dark, then resets',
  usage: '[--connections N]',
  options: { connections: { type: 'string' } },
  needsGc: true,
  prepare(v) {
    const n = num(v, 'connections', 100, 1, 10_000);
    return () => runResumeMemory(n);
  },
};

async function runResumeMemory(n: number): Promise<unknown> {
  const h = suiteHarness();
  try {
    const server = await startServer(h, { endpoint: { resumeWindowMs: WINDOW_MS } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    const agent = startAgent(h, `127.0.0.1:${relay.port}`, { nodeName: 'edge-1', connection: { resumeWindowMs: WINDOW_MS } });
    await waitFor('the agent', () => server.tunnel.registry.agentCount === 1, 10_000);
    const target = await startTCPServer(h, busy);

    const serverLink = (): ResumableLink | undefined => server.tunnel.registry.streamsOf('edge-1')[0]?.sessionLink?.resumable;
    const agentLink = (): ResumableLink | undefined => {
      const sets = agent.clients as unknown as { clients: Map<string, ServerConnection>; suspended: Map<string, ServerConnection> };
      const conn = sets.clients.get('test-server') ?? sets.suspended.get('test-server');
      return (conn as unknown as { resume?: { link: ResumableLink } } | undefined)?.resume?.link;
    };
    const held = (): { server: number; agent: number } => ({
      server: serverLink()?.unacknowledged.dataBytes ?? 0,
      agent: agentLink()?.unacknowledged.dataBytes ?? 0,
    });

    const idleBuffers = buffersMiB();
    const callers: Socket[] = [];
    for (let i = 0; i < n; i++) {
      const r = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
      if (r.status !== 200) throw new Error(`connection ${i}: ${r.head}`);
      callers.push(r.socket);
      busy(r.socket);
    }
    h.defer(() => callers.forEach((s) => s.destroy()));

    const rows: [string, number, number, number][] = [];
    const peak = { server: 0, agent: 0 };
    const sampler = setInterval(() => {
      const now = held();
      peak.server = Math.max(peak.server, now.server);
      peak.agent = Math.max(peak.agent, now.agent);
    }, 10);
    await sleep(2000);
    rows.push(['linked, busy (peak over 2 s)', peak.server, peak.agent, buffersMiB()]);

    relay.freeze();
    const atFreeze = Date.now();
    await waitForSteady('the server link', () => held().server, 500, 20_000);
    await waitForSteady('the agent link', () => held().agent, 500, 20_000);
    rows.push(['path dark, writers stopped', held().server, held().agent, buffersMiB()]);
    await waitFor('the agent to suspend', () => agentLink()?.suspended === true, WINDOW_MS);
    const suspendedAfterMs = Date.now() - atFreeze;
    await waitForSteady('the agent link', () => held().agent, 500, 20_000);
    rows.push([`agent suspended (after ${suspendedAfterMs} ms)`, held().server, held().agent, buffersMiB()]);

    relay.heal();
    await waitFor('the resume', () => agentLink()?.attached === true && serverLink()?.attached === true, 20_000);
    await sleep(2000);
    const blip = relay.blip('reset', 4000);
    await waitFor('both ends to suspend', () => agentLink()?.suspended === true && serverLink()?.suspended === true, 5000);
    await waitForSteady('the links', () => held().server + held().agent, 300, 5000);
    rows.push(['reset: both suspended', held().server, held().agent, buffersMiB()]);
    clearInterval(sampler);
    await blip;

    console.log(
      `session resume, worst case: one agent link, ${n} connections streaming both ways (64 KiB writes, ${mib(DEFAULT_CONN_WINDOW)} MiB flow-control window each)`,
    );
    console.log(`(peak while linked: server ${mib(peak.server)} MiB, agent ${mib(peak.agent)} MiB unacknowledged)`);
    const table = rows.map(([phase, s, a, buffers]) => [phase, `${mib(s)} MiB`, `${mib(a)} MiB`, `${(buffers - idleBuffers).toFixed(1)} MiB`]);
    console.log(formatTable(['phase', 'server kept', 'agent kept', 'Buffers in process'], table));
    console.log(`cap per link: ${mib(DEFAULT_MAX_DATA_BYTES)} MiB; sum of the connections' windows: ${mib(n * DEFAULT_CONN_WINDOW)} MiB`);
    return {
      connections: n,
      peakWhileLinked: peak,
      phases: rows.map(([phase, server, agent, buffers]) => ({ phase, serverKept: server, agentKept: agent, buffersGrowthMiB: buffers - idleBuffers })),
    };
  } finally {
    await h.close();
  }
}
