// npm run bench -- flood: the server's memory and descriptors under a flood
// of callers that never finish their handshake or their request head, and
// after they are gone (issue 14).
//
// The real server and agent CLIs (the server loaded with bench/memory-probe),
// and this process as the attacker, on loopback only. Phases:
//   before  the tunnel warmed up (requests through both master ports), idle;
//   during  the flood held open for --hold-ms: --secure-silent TCP callers on
//           the secure master port that send nothing, --secure-slow TLS
//           callers (with a client certificate) that send half a request
//           head, --insecure-slow the same on the insecure port, and
//           --agent-half-open callers on the agent port that send a
//           ClientHello and never finish the handshake;
//   after   every flood socket closed by us; RSS, heap and descriptors every
//           --after-step-ms for --after-ms.
// --flood-rounds repeats the flood and the after phase (does a second flood
// reuse what the first left, or take more?); --malloc-trim asks the server's
// glibc, through gdb, to give back what it keeps free, to tell memory kept by
// the allocator from memory in use.
// By default the server's handshake and head timeouts are raised above the
// hold time so that the flood is held, not cut short (--server-args replaces
// those flags). --node-args passes Node/V8 options to the server, --env "K=V
// K=V" its environment (e.g. MALLOC_ARENA_MAX=2).

import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { connect as tcpConnect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { startLocalTunnel } from '../hack/local-tunnel.js';
import { KEYS, Probe, vmHWM, type Sample } from './memory-samples.js';
import { envOption, flag, num, text, words, type Scenario } from './options.js';
import { formatTable } from './report.js';

const BATCH = 100;
const MB = 1024 * 1024;
const HALF_HEAD = 'GET /containerLogs/ns/pod/c?follow=true HTTP/1.1\r\nHost: edge-1:10250\r\nX-Slow: ';

function descriptors(pid: number): number {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return -1;
  }
}

/** The first flight of a TLS client (its ClientHello), captured from a real handshake attempt against a local listener. */
async function captureClientHello(ca: string): Promise<Buffer> {
  const sink = createServer();
  sink.listen(0, '127.0.0.1');
  await once(sink, 'listening');
  const got = once(sink, 'connection').then(async ([s]: Socket[]) => {
    const [chunk] = (await once(s!, 'data')) as [Buffer];
    s!.destroy();
    return chunk;
  });
  const client = tlsConnect({ host: '127.0.0.1', port: (sink.address() as AddressInfo).port, ca, servername: 'localhost', ALPNProtocols: ['h2'] });
  client.on('error', () => {});
  const hello = await got;
  client.destroy();
  sink.close();
  return hello;
}

/**
 * Asks the server's glibc to give back the memory it keeps free (gdb calls
 * malloc_trim(0) in the process): what RSS drops by is memory freed but kept
 * by the allocator, not memory in use.
 */
function mallocTrim(pid: number): string {
  const rss = (): number => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  const before = rss();
  const r = spawnSync('gdb', ['-p', String(pid), '-batch', '-ex', 'call (int) malloc_trim(0)'], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) return `malloc_trim through gdb failed (is gdb installed, may this user ptrace?): ${r.stderr.trim().split('\n').pop() ?? ''}`;
  return `malloc_trim(0) in the server (through gdb): RSS ${fmt(before)} -> ${fmt(rss())}`;
}

async function inBatches<T>(n: number, open: () => Promise<T>): Promise<T[]> {
  const all: T[] = [];
  for (let i = 0; i < n; i += BATCH) {
    all.push(...(await Promise.all(Array.from({ length: Math.min(BATCH, n - i) }, open))));
  }
  return all;
}

async function tcp(port: number, first?: Buffer | string): Promise<Socket> {
  const s = tcpConnect(port, '127.0.0.1');
  s.on('error', () => {});
  await once(s, 'connect');
  if (first !== undefined) s.write(first);
  return s;
}

const fmt = (n: number): string => `${(n / MB).toFixed(1)} MB`;

/**
 * Where the RSS of `pid` lies, from /proc/<pid>/smaps: the brk heap (glibc's
 * main malloc arena), anonymous mappings (V8's heap pages, glibc's other
 * arenas, large mallocs) and file-backed mappings (the node binary, libraries).
 */
function rssByKind(pid: number): string {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/smaps`, 'utf8');
  } catch {
    return 'smaps unreadable';
  }
  const kb = { heap: 0, anon: 0, file: 0 };
  let kind: keyof typeof kb = 'anon';
  for (const line of text.split('\n')) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head !== null) {
      const name = head[1]!;
      kind = name === '[heap]' ? 'heap' : name === '' || name.startsWith('[') ? 'anon' : 'file';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss !== null) kb[kind] += Number(rss[1]);
  }
  return `brk heap ${fmt(kb.heap * 1024)}, anonymous ${fmt(kb.anon * 1024)}, files ${fmt(kb.file * 1024)}`;
}

interface FloodOptions {
  secureSilent: number;
  secureSlow: number;
  insecureSlow: number;
  agentHalfOpen: number;
  holdMs: number;
  afterMs: number;
  afterStepMs: number;
  rounds: number;
  mallocTrim: boolean;
  /** Replaces the server flags that hold the flood open; undefined: those flags. */
  serverArgs: string[] | undefined;
  nodeArgs: string[];
  env: NodeJS.ProcessEnv;
}

export const floodScenario: Scenario = {
  name: 'flood',
  summary: "the server's memory and descriptors under a flood of callers that never finish their handshake or head, and after",
  usage:
    '[--secure-silent N] [--secure-slow N] [--insecure-slow N] [--agent-half-open N] [--hold-ms MS] [--after-ms MS] [--after-step-ms MS] ' +
    '[--flood-rounds N] [--malloc-trim] [--server-args "..."] [--node-args "..."] [--env "K=V ..."]',
  options: {
    'secure-silent': { type: 'string' },
    'secure-slow': { type: 'string' },
    'insecure-slow': { type: 'string' },
    'agent-half-open': { type: 'string' },
    'hold-ms': { type: 'string' },
    'after-ms': { type: 'string' },
    'after-step-ms': { type: 'string' },
    'flood-rounds': { type: 'string' },
    'malloc-trim': { type: 'boolean' },
    'server-args': { type: 'string' },
    'node-args': { type: 'string' },
    env: { type: 'string' },
  },
  prepare(v) {
    const serverArgs = text(v, 'server-args');
    const o: FloodOptions = {
      secureSilent: num(v, 'secure-silent', 1500, 0, 100_000),
      secureSlow: num(v, 'secure-slow', 1500, 0, 100_000),
      insecureSlow: num(v, 'insecure-slow', 2000, 0, 100_000),
      agentHalfOpen: num(v, 'agent-half-open', 1500, 0, 100_000),
      holdMs: num(v, 'hold-ms', 10_000, 0, 3_600_000),
      afterMs: num(v, 'after-ms', 60_000, 0, 3_600_000),
      afterStepMs: num(v, 'after-step-ms', 10_000, 100, 3_600_000),
      rounds: num(v, 'flood-rounds', 1, 1, 100),
      mallocTrim: flag(v, 'malloc-trim'),
      serverArgs: serverArgs === undefined ? undefined : words(serverArgs),
      nodeArgs: words(text(v, 'node-args')),
      env: envOption(v, 'env'),
    };
    return () => runFlood(o);
  },
};

async function runFlood(o: FloodOptions): Promise<unknown> {
  const probe = new Probe((line) => {
    if (process.env.BENCH_VERBOSE === '1') process.stderr.write(`[server] ${line}\n`);
  });
  const holdFlags = ['--tls-handshake-timeout', '10m', '--request-head-timeout', '10m'];
  const local = await startLocalTunnel({
    nodeName: 'edge-1',
    serverArgs: o.serverArgs ?? holdFlags,
    serverNodeArgs: ['--import', new URL('./memory-probe.js', import.meta.url).href, ...o.nodeArgs],
    serverEnv: o.env,
    onOutput: (who, text) => who === 'server' && probe.onText(text),
  });
  const pid = local.children[0]!.pid!;
  const flood: Socket[] = [];
  try {
    const readCert = (f: string): string => readFileSync(join(local.certDir, f), 'utf8');
    const [ca, cert, key] = [readCert('ca.crt'), readCert('tunnel-proxy-client.crt'), readCert('tunnel-proxy-client.key')];
    const secureCaller = async (): Promise<TLSSocket> => {
      const s = tlsConnect({ host: '127.0.0.1', port: local.securePort, ca, cert, key, servername: 'localhost', ALPNProtocols: ['http/1.1'] });
      s.on('error', () => {});
      await once(s, 'secureConnect');
      return s;
    };
    // Warm-up: whole requests through both master ports (no kubelet behind: each is answered 502).
    for (let i = 0; i < 200; i++) {
      const s = i % 2 === 0 ? await secureCaller() : await tcp(local.insecurePort);
      s.end('GET /healthz HTTP/1.1\r\nHost: edge-1:10250\r\nConnection: close\r\n\r\n');
      s.resume();
      await once(s, 'close');
    }
    const hello = await captureClientHello(ca);
    await sleep(5000);
    const before = await probe.next();
    const fdBefore = descriptors(pid);
    const whereBefore = rssByKind(pid);

    const rows: Array<[string, Sample, number]> = [['before', before, fdBefore]];
    const where = [`before: ${whereBefore}`];
    let openSeconds = 0;
    for (let round = 1; round <= o.rounds; round++) {
      const label = (what: string): string => (o.rounds > 1 ? `${round}: ${what}` : what);
      probe.resetPeak();
      const started = performance.now();
      flood.push(...(await inBatches(o.secureSilent, () => tcp(local.securePort))));
      flood.push(
        ...(await inBatches(o.secureSlow, async () => {
          const s = await secureCaller();
          s.write(HALF_HEAD);
          return s;
        })),
      );
      flood.push(...(await inBatches(o.insecureSlow, () => tcp(local.insecurePort, HALF_HEAD))));
      flood.push(...(await inBatches(o.agentHalfOpen, () => tcp(local.agentPort, hello))));
      openSeconds = (performance.now() - started) / 1000;
      await sleep(o.holdMs);
      rows.push([label('during'), await probe.next(), descriptors(pid)]);
      where.push(`${label('during')}: ${rssByKind(pid)}`);
      rows.push([label('peak'), { ...probe.peak }, -1]);
      for (const s of flood.splice(0)) s.destroy();
      for (let t = o.afterStepMs; t <= o.afterMs; t += o.afterStepMs) {
        await sleep(o.afterStepMs);
        rows.push([label(`after ${t / 1000} s`), await probe.next(), descriptors(pid)]);
      }
      where.push(`${label(`after ${o.afterMs / 1000} s`)}: ${rssByKind(pid)}`);
    }
    const last = rows[rows.length - 1]![1];
    const trimmed = o.mallocTrim ? mallocTrim(pid) : undefined;

    const callers = o.secureSilent + o.secureSlow + o.insecureSlow + o.agentHalfOpen;
    console.log(
      `server memory, ${o.rounds > 1 ? `${o.rounds} floods` : 'a flood'} of ${callers} callers (${o.secureSilent} silent TCP on the secure port, ${o.secureSlow} slow heads over TLS, ` +
        `${o.insecureSlow} slow heads on the insecure port, ${o.agentHalfOpen} half-open TLS on the agent port), opened in ${openSeconds.toFixed(1)} s, ` +
        `held ${o.holdMs / 1000} s` +
        `${o.nodeArgs.length > 0 ? `; server node args: ${o.nodeArgs.join(' ')}` : ''}` +
        `${
          Object.keys(o.env).length > 0
            ? `; server env: ${Object.entries(o.env)
                .map(([k, v]) => `${k}=${v}`)
                .join(' ')}`
            : ''
        }`,
    );
    const header = ['', ...KEYS, 'fds'];
    const table = rows.map(([name, s, fds]) => [name, ...KEYS.map((k) => fmt(s[k])), fds < 0 ? '' : String(fds)]);
    console.log(formatTable(header, table));
    const hwm = vmHWM(pid);
    if (hwm !== undefined) console.log(`kernel RSS high-water mark (VmHWM): ${fmt(hwm)}`);
    console.log(`RSS by kind of mapping: ${where.join('; ')}`);
    console.log(`after ${o.afterMs / 1000} s: RSS ${((last.rss / before.rss - 1) * 100).toFixed(0)} % over its level before the flood`);
    if (trimmed !== undefined) console.log(trimmed);
    return { options: o, rows: rows.map(([phase, sample, fds]) => ({ phase, ...sample, fds })), vmHWM: hwm, rssByKind: where, mallocTrim: trimmed };
  } finally {
    for (const s of flood) s.destroy();
    await local.stop();
  }
}
