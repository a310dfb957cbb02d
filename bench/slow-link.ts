// npm run bench -- slow-link [--rate KIB_PER_S] [--seconds S] [--rounds N] [--only PAIRS]
//
// A slow edge uplink shared by a download and an interactive session: every
// pair's agent dials its server through a relay in this process that carries
// agent → server at --rate KiB/s (default 256: 2 Mbit/s; server → agent at
// once), as test/support/slow-relay.ts does. For each pair, rounds alternating
// with the order rotating: a download of rate × seconds bytes from the target
// and beside it, on a second connection through the same pair, one byte
// echoed every 20 ms until the download ends (bench/client-ops.ts,
// echoBesideBulk; the client in its own process). Printed: the echoes' p50,
// p99 and max while the download ran, and the download's rate as a share of
// the link's. What a user sees is the echo: `kubectl exec` typing while
// `kubectl logs` pulls a large log through the same node's link.

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { suiteHarness } from '../test/support/harness.js';
import { startSlowRelay } from '../test/support/slow-relay.js';
import { ClientProcess } from './client-process.js';
import { parsePairNames, rotation, startPair, type Pair, type PairName } from './pairs.js';
import { loadAverage } from './proc.js';
import { formatSpread, median, percentile, spread } from './stats.js';
import { prepareOnePair, stopOnePair } from './one-pair.js';
import { num, text, type Scenario } from './options.js';
import { formatTable } from './report.js';
import { machineInfo } from './machine.js';

interface Row {
  p50: number[];
  p99: number[];
  max: number[];
  /** Download rate as a share of the link's, %. */
  share: number[];
}

export const slowLinkScenario: Scenario = {
  name: 'slow-link',
  summary: 'an echo beside a download over a 2 Mbit/s edge uplink, ours against Konnectivity (~2 min)',
  usage: '[--rate KIB_PER_S] [--seconds S] [--rounds N] [--only ours,konnectivity]',
  options: { rate: { type: 'string' }, seconds: { type: 'string' }, rounds: { type: 'string' }, only: { type: 'string' } },
  prepare(v) {
    const kibPerSecond = num(v, 'rate', 256, 16, 100_000);
    const seconds = num(v, 'seconds', 12, 2, 120);
    const rounds = num(v, 'rounds', 3, 1, 20);
    const only = text(v, 'only');
    const names = only === undefined ? undefined : parsePairNames(only);
    return () => runSlowLink(kibPerSecond, seconds, rounds, names);
  },
};

async function runSlowLink(kibPerSecond: number, seconds: number, rounds: number, only: PairName[] | undefined): Promise<unknown> {
  const rate = kibPerSecond * 1024;
  const bytes = Math.round(rate * seconds);
  const dir = mkdtempSync(join(tmpdir(), 'yurt-slow-link-'));
  const children: ChildProcess[] = [];
  const h = suiteHarness();
  let client: ClientProcess | undefined;
  let pair: Pair | undefined;
  try {
    const ctx = await prepareOnePair(dir, children, []);
    ctx.agentDialPort = async (serverPort) => (await startSlowRelay(h, serverPort, rate)).port;
    const names = (only ?? ['yurt-tunnel', 'Konnectivity']).filter((n) => n !== 'Konnectivity' || ctx.go !== undefined);
    if (names.length === 0) throw new Error('nothing to run: the Konnectivity binaries are not built (../shared/konnectivity/README.md)');
    const m = machineInfo(ctx.go);
    console.log(`machine: nproc ${m.nproc}, ${m.cpuModel}, Linux ${m.kernel}, Node ${m.node}`);
    console.log(
      `uplink (agent → server) ${kibPerSecond} KiB/s (${((rate * 8) / 1e6).toFixed(1)} Mbit/s); download ${(bytes / 2 ** 20).toFixed(1)} MiB; ` +
        `an echo every 20 ms beside it; ${rounds} rounds, order rotating; load average at start ${loadAverage().toFixed(2)}`,
    );
    client = await ClientProcess.start();
    const rows = new Map<PairName, Row>(names.map((n) => [n, { p50: [], p99: [], max: [], share: [] }]));
    for (let round = 0; round < rounds; round++) {
      const order = rotation(names, round);
      console.log(`round ${round + 1}/${rounds}: ${order.join(', ')}`);
      for (const name of order) {
        pair = await startPair(name, ctx);
        // The link's first keepalive round trip (ours pings as the link comes up) is in before the download.
        await sleep(500);
        const r = await client.call({ op: 'beside', path: pair.path, bytes, everyMs: 20 });
        await pair.stop();
        pair = undefined;
        const row = rows.get(name)!;
        row.p50.push(percentile(r.echoMs, 50));
        row.p99.push(percentile(r.echoMs, 99));
        row.max.push(Math.max(...r.echoMs));
        row.share.push((100 * r.bytes) / r.seconds / rate);
      }
    }
    print(rows);
    console.log(`load average at the end ${loadAverage().toFixed(2)}`);
    return { machine: m, kibPerSecond, seconds, rounds, figures: Object.fromEntries(rows) };
  } finally {
    await stopOnePair(pair, client, children, dir);
    await h.close();
  }
}

function print(rows: Map<PairName, Row>): void {
  const ours = rows.get('yurt-tunnel');
  const konn = rows.get('Konnectivity');
  const both = ours !== undefined && konn !== undefined;
  const line = (label: string, pick: (r: Row) => number[], digits: number): string[] => [
    label,
    ...[...rows.values()].map((r) => formatSpread(spread(pick(r)), digits)),
    both ? `${(median(pick(ours)) / median(pick(konn))).toFixed(2)}×` : '',
  ];
  const body = [
    line('echo beside the download, p50, ms', (r) => r.p50, 1),
    line('echo beside the download, p99, ms', (r) => r.p99, 0),
    line('echo beside the download, max, ms', (r) => r.max, 0),
    line("download, % of the link's rate", (r) => r.share, 0),
  ];
  console.log('\n' + formatTable(['', ...rows.keys(), both ? 'ours ÷ Konn.' : ''], body));
  console.log('median of the rounds (range in brackets)');
}
