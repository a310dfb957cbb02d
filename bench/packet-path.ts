// npm run bench:packet-path — what one packet costs in our framing and codec
// (pkg/grpc, pkg/protocol), in one process over real node:http2 sessions on
// an in-memory transport (test/support/memory-link.ts): no kernel, no TLS, no
// other process, so a busy machine changes it little. For each scenario: CPU
// per operation (the best of the runs), Buffer allocations, transport writes
// and garbage collections per operation.
//   rtt      a 1-byte DATA packet to the server and one back
//   bulk     64 KiB DATA packets agent → server (per 64 KiB), with back-pressure
//   control  a DIAL_REQ to the agent and its DIAL_RSP back
// Each scenario runs twice: on the calls themselves, and through a
// ResumableLink at each end (session resume: numbering, the resend buffer,
// acknowledgements), so that what resume costs per packet shows beside it.

import { PerformanceObserver } from 'node:perf_hooks';
import { memoryLinkPair, sendWithBackPressure, type MemoryLinkPair } from '../test/support/memory-link.js';
import { countBufferAllocations } from '../test/support/buffer-allocations.js';
import type { PacketLink } from '../pkg/mux/packet-link.js';
import { ResumableLink } from '../pkg/mux/resumable-link.js';
import type { Packet } from '../pkg/protocol/packet.js';

const RUNS = Number(process.env.PACKET_PATH_RUNS ?? 5);

interface Figures {
  cpuUs: number;
  allocations: number;
  writes: number;
  gcs: number;
  byFactory: Record<string, number>;
}

let gcs = 0;
new PerformanceObserver((list) => (gcs += list.getEntries().length)).observe({ entryTypes: ['gc'] });

/** What a scenario drives: the two ends, plain calls or resumable links over them. */
interface Ends {
  agent: PacketLink;
  server: PacketLink;
  onAgentPacket(handler: (p: Packet) => void): void;
  onServerPacket(handler: (p: Packet) => void): void;
}

function plainEnds(pair: MemoryLinkPair): Ends {
  return pair;
}

/** Each end behind a ResumableLink, as a session with resume negotiated has it. */
function resumableEnds(pair: MemoryLinkPair): Ends & { close(): void } {
  let onAgent: (p: Packet) => void = () => {};
  let onServer: (p: Packet) => void = () => {};
  const broken = (err: Error): never => {
    throw err;
  };
  const agent = new ResumableLink({ onPacket: (p) => onAgent(p), onBroken: broken });
  const server = new ResumableLink({ onPacket: (p) => onServer(p), onBroken: broken });
  pair.onAgentPacket((p) => agent.receive(pair.agent, p));
  pair.onServerPacket((p) => server.receive(pair.server, p));
  agent.attach(pair.agent, 0);
  server.attach(pair.server, 0);
  return {
    agent,
    server,
    onAgentPacket: (h) => (onAgent = h),
    onServerPacket: (h) => (onServer = h),
    close: () => (agent.close(), server.close()),
  };
}

async function measure(ops: number, run: (ends: Ends) => Promise<void>, resumable: boolean): Promise<Figures> {
  const pair = await memoryLinkPair();
  const wrapped = resumable ? resumableEnds(pair) : undefined;
  const ends = wrapped ?? plainEnds(pair);
  try {
    const writes0 = pair.agentTransport.writes + pair.serverTransport.writes;
    const gc0 = gcs;
    const cpu0 = process.cpuUsage();
    const byFactory: Record<string, number> = {};
    const allocations = await countBufferAllocations(() => run(ends), byFactory);
    const cpu = process.cpuUsage(cpu0);
    await new Promise((r) => setImmediate(r));
    return {
      cpuUs: (cpu.user + cpu.system) / ops,
      allocations: allocations / ops,
      writes: (pair.agentTransport.writes + pair.serverTransport.writes - writes0) / ops,
      gcs: (gcs - gc0) / ops,
      byFactory: Object.fromEntries(Object.entries(byFactory).map(([k, v]) => [k, v / ops])),
    };
  } finally {
    wrapped?.close();
    await pair.close();
  }
}

function rtt(rounds: number) {
  return (pair: Ends): Promise<void> =>
    new Promise((resolve) => {
      const one = Buffer.from([1]);
      let left = rounds;
      pair.onServerPacket((p) => {
        if (p.type === 'DATA') pair.server.sendData(p.connectID, p.data, () => {});
      });
      pair.onAgentPacket(() => {
        if (--left === 0) resolve();
        else pair.agent.sendData(1n, one, () => {});
      });
      pair.agent.sendData(1n, one, () => {});
    });
}

function bulk(messages: number) {
  return (pair: Ends): Promise<void> =>
    new Promise((resolve) => {
      const payload = Buffer.alloc(64 * 1024, 0x5a);
      let received = 0;
      pair.onServerPacket((p) => {
        if (p.type === 'DATA' && ++received === messages) resolve();
      });
      sendWithBackPressure(pair.agent, 7n, payload, messages);
    });
}

function control(rounds: number) {
  return (pair: Ends): Promise<void> =>
    new Promise((resolve) => {
      let left = rounds;
      pair.onAgentPacket((p) => {
        if (p.type === 'DIAL_REQ') pair.agent.sendControl({ type: 'DIAL_RSP', random: p.random, connectID: 5n, error: '' });
      });
      pair.onServerPacket(() => {
        if (--left === 0) resolve();
        else pair.server.sendControl({ type: 'DIAL_REQ', protocol: 'tcp', address: '127.0.0.1:10250', random: 0x7fff_ffff_ffffn + BigInt(left) });
      });
      pair.server.sendControl({ type: 'DIAL_REQ', protocol: 'tcp', address: '127.0.0.1:10250', random: 1n });
    });
}

async function main(): Promise<void> {
  const scenarios: Array<[string, number, (ends: Ends) => Promise<void>]> = [
    ['rtt (1-byte DATA there and back)', 20_000, rtt(20_000)],
    ['bulk (per 64 KiB DATA)', 4096, bulk(4096)],
    ['control (DIAL_REQ + DIAL_RSP)', 20_000, control(20_000)],
  ];
  console.log(`best of ${RUNS} runs; allocations are Buffer.alloc/allocUnsafe/allocUnsafeSlow/concat/from calls`);
  for (const [scenario, ops, run] of scenarios) {
    for (const resumable of [false, true]) {
      const name = resumable ? '  … through ResumableLinks' : scenario;
      const runs: Figures[] = [];
      for (let i = 0; i < RUNS; i++) runs.push(await measure(ops, run, resumable));
      const best = runs.reduce((a, b) => (b.cpuUs < a.cpuUs ? b : a));
      console.log(
        `${name.padEnd(34)} CPU ${best.cpuUs.toFixed(2).padStart(7)} µs/op (runs ${runs.map((r) => r.cpuUs.toFixed(1)).join(', ')})  ` +
          `allocations ${best.allocations.toFixed(2)}/op ${JSON.stringify(best.byFactory)}  writes ${best.writes.toFixed(2)}/op  GCs ${(best.gcs * 1000).toFixed(2)}/1000 ops`,
      );
    }
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
