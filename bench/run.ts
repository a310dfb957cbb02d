// npm run bench: the tunnel against a direct loopback connection, in one run.
//
// Roles run in separate processes, as in production: yurt-tunnel-server and
// yurt-tunnel-agent (the real CLIs), a target (bench/target.ts), and this
// process as the client for both paths, so each ratio compares like with like.
//
//   direct:  client ──TCP──► target
//   tunnel:  client ──CONNECT over UDS──► server ──gRPC/mTLS──► agent ──TCP──► target
//   GETs:    client ──HTTPS──► master port ─(in-process dial)─► agent ──TLS──► stand-in kubelet,
//            against client ──HTTPS──► stand-in kubelet
//
// Absolute numbers depend on the machine; the ratios are what to compare.

import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, readFileSync } from 'node:fs';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { REPO_ROOT, startLocalTunnel, startProcess, type LocalTunnel } from '../hack/local-tunnel.js';
import { issueCertificate } from '../pkg/certs/pki.js';
import { dialThroughProxier } from '../pkg/interceptor/proxier-dialer.js';
import { findGoBinaries, startGoAgentOnOurs, startGoPair, stopAll } from './konnectivity.js';

const BULK_BYTES = Number(process.env.BENCH_BULK_MIB ?? 256) * 1024 * 1024;
const PARALLEL_BYTES = 64 * 1024 * 1024;
const RTT_ROUNDS = 3000;
const CONN_ROUNDS = 300;
const RUNS = 3;
const GET_REQUESTS = 3000;
const GET_CONCURRENCY = 8;

const VERBOSE = process.env.BENCH_VERBOSE === '1';

const USAGE = `usage: node dist/bench/run.js [--only master-gets]

Runs yurt-tunnel-server, yurt-tunnel-agent, a target and a stand-in kubelet as
processes and prints each figure next to the same figure on a direct loopback
path, then (when the Go binaries are found) the Konnectivity reference rows.

  --only master-gets   only the small GETs through the secure master port
                       against the same GETs straight to the stand-in kubelet
  --help               this text

Environment: BENCH_BULK_MIB (bulk size, default 256), BENCH_VERBOSE=1 (the
processes' logs at -v=3), BENCH_AGENT_NODE_ARGS (Node options for the agent).`;

/** The command line: the whole bench, or only one part of it. */
function parseArgs(argv: readonly string[]): { only: 'master-gets' | undefined } {
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(USAGE);
    process.exit(0);
  }
  if (argv.length === 0) return { only: undefined };
  if (argv.length === 2 && argv[0] === '--only' && argv[1] === 'master-gets') return { only: 'master-gets' };
  console.error(`bench: unknown arguments ${JSON.stringify(argv.join(' '))}\n\n${USAGE}`);
  process.exit(2);
}

type Dial = () => Promise<Socket>;

function readExactly(socket: Socket, n: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let have = 0;
    const onData = (c: Buffer): void => {
      have += c.length;
      if (have >= n) {
        socket.off('data', onData);
        socket.off('close', onClose);
        resolve();
      }
    };
    const onClose = (): void => reject(new Error(`${socket.remoteAddress === undefined ? "tunnel" : "direct"}: closed after ${have} of ${n} bytes`));
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.resume();
  });
}

/** Seconds to receive `bytes` from the target. */
async function bulkOnce(dial: Dial, bytes: number): Promise<number> {
  const socket = await dial();
  const head = Buffer.alloc(9);
  head.write('B');
  head.writeBigUInt64BE(BigInt(bytes), 1);
  const started = performance.now();
  socket.write(head);
  await readExactly(socket, bytes);
  const seconds = (performance.now() - started) / 1000;
  socket.destroy();
  return seconds;
}

async function rtt(dial: Dial, rounds: number): Promise<number[]> {
  const socket = await dial();
  socket.setNoDelay(true);
  socket.write('P');
  const one = Buffer.from([1]);
  const samples: number[] = [];
  for (let i = 0; i < rounds + 200; i++) {
    const t0 = performance.now();
    const got = once(socket, 'data');
    socket.write(one);
    await got;
    if (i >= 200) samples.push((performance.now() - t0) * 1000);
  }
  socket.destroy();
  return samples;
}

/** Milliseconds per new connection: open, one byte there and back, close. */
async function newConnections(dial: Dial, rounds: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    const socket = await dial();
    const got = once(socket, 'data');
    socket.write('P!');
    socket.resume();
    await got;
    samples.push(performance.now() - t0);
    socket.destroy();
  }
  return samples;
}

async function parallel(dial: Dial, flows: number, bytes: number): Promise<{ total: number; perFlow: number[] }> {
  const started = performance.now();
  const perFlow = await Promise.all(Array.from({ length: flows }, () => bulkOnce(dial, bytes)));
  const total = (flows * bytes) / ((performance.now() - started) / 1000);
  return { total, perFlow: perFlow.map((s) => bytes / s) };
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const MiB = 1024 * 1024;
const rows: Array<[string, string, string, string]> = [];
function row(metric: string, direct: number, tunnel: number, unit: string, digits = 1, higherIsBetter = true): void {
  const ratio = higherIsBetter ? tunnel / direct : direct / tunnel;
  rows.push([metric, `${direct.toFixed(digits)} ${unit}`, `${tunnel.toFixed(digits)} ${unit}`, `${(ratio * 100).toFixed(1)} %`]);
}

function printTable(): void {
  const header: [string, string, string, string] = ['metric', 'direct', 'tunnel', 'tunnel / direct'];
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]): string => r.map((c, i) => c.padEnd(widths[i]!)).join('  ');
  console.log('\n' + line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) console.log(line(r));
  console.log('\n(ratios: throughput tunnel/direct; latency direct/tunnel, so 100 % = as fast as direct)');
}

/** Small GETs over keep-alive HTTPS connections: requests per second and sorted latencies (ms). */
async function smallGets(port: number, host: string, tls: { ca: string; cert: string; key: string }): Promise<{ rate: number; samples: number[] }> {
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: GET_CONCURRENCY });
  const one = (): Promise<number> =>
    new Promise((resolve, reject) => {
      const t0 = performance.now();
      const req = httpsRequest({ host: '127.0.0.1', port, path: '/healthz', headers: { Host: host }, ...tls, servername: '', agent }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve(performance.now() - t0) : reject(new Error(`status ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end();
    });
  for (let i = 0; i < 200; i++) await one(); // warm-up
  const samples: number[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: GET_CONCURRENCY }, async () => {
      while (next++ < GET_REQUESTS) samples.push(await one());
    }),
  );
  const rate = GET_REQUESTS / ((performance.now() - started) / 1000);
  agent.destroy();
  return { rate, samples: samples.sort((a, b) => a - b) };
}

interface PathFigures {
  bulk: number;
  rttP50: number;
  rttP99: number;
  connP50: number;
  flows4: number;
}

/** The core figures of one path, measured as for the main table (fewer rounds for new connections). */
async function measurePath(dial: Dial): Promise<PathFigures> {
  const bulk: number[] = [];
  for (let i = 0; i < RUNS; i++) bulk.push(BULK_BYTES / (await bulkOnce(dial, BULK_BYTES)) / MiB);
  const r = (await rtt(dial, RTT_ROUNDS)).sort((a, b) => a - b);
  const c = (await newConnections(dial, CONN_ROUNDS)).sort((a, b) => a - b);
  const p = await parallel(dial, 4, PARALLEL_BYTES);
  return { bulk: median(bulk), rttP50: percentile(r, 50), rttP99: percentile(r, 99), connP50: percentile(c, 50), flows4: p.total / MiB };
}

/** Konnectivity's Go server and agent, and the Go agent behind our server, beside direct and ours. */
function printReferenceTable(paths: Array<[string, PathFigures]>): void {
  const [, direct] = paths[0]!;
  const metrics: Array<[string, keyof PathFigures, string, number, boolean]> = [
    ['bulk throughput', 'bulk', 'MiB/s', 1, true],
    ['RTT p50', 'rttP50', 'µs', 0, false],
    ['RTT p99', 'rttP99', 'µs', 0, false],
    ['new connection p50', 'connP50', 'ms', 3, false],
    ['4 flows, together', 'flows4', 'MiB/s', 1, true],
  ];
  const header = ['metric', ...paths.map(([name]) => name)];
  const body = metrics.map(([label, key, unit, digits, higher]) => [
    label,
    ...paths.map(([, f], i) => {
      const v = `${f[key].toFixed(digits)} ${unit}`;
      if (i === 0) return v;
      const ratio = higher ? f[key] / direct[key] : direct[key] / f[key];
      return `${v} (${(ratio * 100).toFixed(1)} %)`;
    }),
  ]);
  const all = [header, ...body];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: string[]): string => r.map((c, i) => c.padEnd(widths[i]!)).join('  ');
  console.log('\n' + line(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of body) console.log(line(r));
  console.log('\n(in brackets: the ratio to direct, as in the table above)');
}

/**
 * CPU time (user + system) process `pid` has used so far, in ms, from
 * /proc/<pid>/stat (Linux; clock ticks of 10 ms). Undefined where there is no /proc.
 */
function cpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined || !existsSync(`/proc/${pid}/stat`)) return undefined;
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/** Small GETs through the secure master port, against the same GETs straight to the stand-in kubelet. */
async function masterPortGets(children: ChildProcess[], local: LocalTunnel): Promise<void> {
  console.log(`small GETs (/healthz), ${GET_REQUESTS} over ${GET_CONCURRENCY} keep-alive connections ...`);
  const kubeletProc = await startProcess(children, join(REPO_ROOT, 'dist/bench/kubelet.js'), [local.certDir], /^(\d+)\n/);
  const kubeletPort = Number(kubeletProc.match[1]);
  const ca = { cert: readFileSync(join(local.certDir, 'ca.crt'), 'utf8'), key: readFileSync(join(local.certDir, 'ca.key'), 'utf8') };
  const caller = issueCertificate(ca, { commonName: 'kube-apiserver-kubelet-client', organizations: ['system:masters'], usages: ['clientAuth'] });
  const tls = { ca: ca.cert, cert: caller.cert, key: caller.key };
  const gd = await smallGets(kubeletPort, `127.0.0.1:${kubeletPort}`, tls);
  // CPU per GET is steadier than the rates on a shared machine: the server's and the agent's, over the tunnelled run.
  const [server, agent] = local.children;
  const before = [cpuMs(server?.pid), cpuMs(agent?.pid)];
  const gm = await smallGets(local.securePort, `${local.nodeName}:${kubeletPort}`, tls);
  const after = [cpuMs(server?.pid), cpuMs(agent?.pid)];
  const perGet = (i: number): string => {
    const [b, a] = [before[i], after[i]];
    return b === undefined || a === undefined ? 'unknown' : `${(((a - b) * 1000) / (GET_REQUESTS + 200)).toFixed(0)} µs`;
  };
  console.log(`CPU per GET through the master port (warm-up included): server ${perGet(0)}, agent ${perGet(1)}`);
  row('GET through master port, per second', gd.rate, gm.rate, '/s', 0);
  row('GET through master port, p50', percentile(gd.samples, 50), percentile(gm.samples, 50), 'ms', 3, false);
  row('GET through master port, p99', percentile(gd.samples, 99), percentile(gm.samples, 99), 'ms', 3, false);
}

async function main(): Promise<void> {
  const { only } = parseArgs(process.argv.slice(2));
  const children: ChildProcess[] = [];
  const verbose = VERBOSE ? ['--v', '3'] : [];
  const echo = VERBOSE ? (who: string, text: string): void => void process.stderr.write(`[${who}] ${text}`) : undefined;
  const target = await startProcess(children, join(REPO_ROOT, 'dist/bench/target.js'), [], /^(\d+)\n/);
  // BENCH_AGENT_NODE_ARGS: Node/V8 options for the agent (e.g. --max-semi-space-size=2), to see what they cost.
  const agentNodeArgs = (process.env.BENCH_AGENT_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  const local = await startLocalTunnel({ nodeName: 'bench', serverArgs: verbose, agentArgs: verbose, agentNodeArgs, onOutput: echo });
  try {
    if (only === 'master-gets') {
      await masterPortGets(children, local);
      printTable();
      return;
    }
    const targetPort = Number(target.match[1]);
    const uds = local.udsPath;
    const address = `127.0.0.1:${targetPort}`;
    const direct: Dial = async () => {
      const s = connect({ port: targetPort, host: '127.0.0.1', noDelay: true });
      await once(s, 'connect');
      return s;
    };
    const tunnel: Dial = () => dialThroughProxier({ udsPath: uds, address });

    console.log(`bulk ${BULK_BYTES / MiB} MiB target→client, median of ${RUNS} ...`);
    const bulkDirect: number[] = [];
    const bulkTunnel: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      bulkDirect.push(BULK_BYTES / (await bulkOnce(direct, BULK_BYTES)) / MiB);
      bulkTunnel.push(BULK_BYTES / (await bulkOnce(tunnel, BULK_BYTES)) / MiB);
    }
    row('bulk throughput', median(bulkDirect), median(bulkTunnel), 'MiB/s');

    console.log(`round trip of 1 byte, ${RTT_ROUNDS} rounds ...`);
    const rd = (await rtt(direct, RTT_ROUNDS)).sort((a, b) => a - b);
    const rt = (await rtt(tunnel, RTT_ROUNDS)).sort((a, b) => a - b);
    row('RTT p50', percentile(rd, 50), percentile(rt, 50), 'µs', 0, false);
    row('RTT p99', percentile(rd, 99), percentile(rt, 99), 'µs', 0, false);

    console.log(`new connections, ${CONN_ROUNDS} one after another ...`);
    const cd = (await newConnections(direct, CONN_ROUNDS)).sort((a, b) => a - b);
    const ct = (await newConnections(tunnel, CONN_ROUNDS)).sort((a, b) => a - b);
    row('new connection p50', percentile(cd, 50), percentile(ct, 50), 'ms', 3, false);
    row('new connection p99', percentile(cd, 99), percentile(ct, 99), 'ms', 3, false);
    const rate = (s: number[]): number => 1000 / (s.reduce((a, b) => a + b, 0) / s.length);
    row('new connections per second', rate(cd), rate(ct), '/s', 0);

    console.log(`4 parallel flows of ${PARALLEL_BYTES / MiB} MiB ...`);
    const pd = await parallel(direct, 4, PARALLEL_BYTES);
    const pt = await parallel(tunnel, 4, PARALLEL_BYTES);
    row('4 flows, together', pd.total / MiB, pt.total / MiB, 'MiB/s');
    const fairness = (r: { perFlow: number[] }): number => (Math.min(...r.perFlow) / Math.max(...r.perFlow)) * 100;
    rows.push(['4 flows, slowest/fastest', `${fairness(pd).toFixed(0)} %`, `${fairness(pt).toFixed(0)} %`, '']);
    row('4 flows vs 1 flow (tunnel)', median(bulkTunnel), pt.total / MiB, 'MiB/s');

    await masterPortGets(children, local);

    printTable();

    const go = findGoBinaries();
    if (typeof go === 'string') {
      console.log(`\nKonnectivity rows left out: ${go}`);
    } else {
      console.log('\nthe same figures for the Konnectivity v0.30 Go peers on this machine ...');
      const goChildren: ChildProcess[] = [];
      try {
        const goUds = await startGoPair(goChildren, go, local.certDir, local.dir);
        const goHost = await startGoAgentOnOurs(goChildren, go, local.certDir, local.dir, local.agentPort);
        const figures: Array<[string, PathFigures]> = [
          ['direct', { bulk: median(bulkDirect), rttP50: percentile(rd, 50), rttP99: percentile(rd, 99), connP50: percentile(cd, 50), flows4: pd.total / MiB }],
          ['yurt-tunnel', { bulk: median(bulkTunnel), rttP50: percentile(rt, 50), rttP99: percentile(rt, 99), connP50: percentile(ct, 50), flows4: pt.total / MiB }],
          ['Konnectivity (Go server + Go agent)', await measurePath(() => dialThroughProxier({ udsPath: goUds, address }))],
          ['Go agent behind our server', await measurePath(() => dialThroughProxier({ udsPath: uds, address, proxyHost: goHost }))],
        ];
        printReferenceTable(figures);
      } finally {
        await stopAll(goChildren);
      }
    }
  } finally {
    await local.stop();
    for (const c of children) c.kill('SIGTERM');
  }
}

main().catch((err: unknown) => {
  console.error(`bench failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`);
  process.exit(1);
});
