// node dist/bench/flood.js — the server's memory and descriptors under a flood
// of callers that never finish their handshake or their request head, and
// after they are gone (issue 14).
//
// The real server and agent CLIs (the server loaded with bench/memory-probe),
// and this process as the attacker, on loopback only. Phases:
//   before  the tunnel warmed up (requests through both master ports), idle;
//   during  the flood held open: FLOOD_SECURE_SILENT TCP callers on the secure
//           master port that send nothing, FLOOD_SECURE_SLOW TLS callers (with
//           a client certificate) that send half a request head,
//           FLOOD_INSECURE_SLOW the same on the insecure port, and
//           FLOOD_AGENT_HALF_OPEN callers on the agent port that send a
//           ClientHello and never finish the handshake;
//   after   every flood socket closed by us; RSS, heap and descriptors every
//           AFTER_STEP_MS for AFTER_MS.
// FLOOD_ROUNDS repeats the flood and the after phase (does a second flood
// reuse what the first left, or take more?); FLOOD_MALLOC_TRIM=1 asks the
// server's glibc, through gdb, to give back what it keeps free, to tell
// memory kept by the allocator from memory in use.
// By default the server's handshake and head timeouts are raised above the
// hold time so that the flood is held, not cut short (FLOOD_SERVER_ARGS
// replaces those flags). SERVER_NODE_ARGS passes Node/V8 options to the server,
// SERVER_ENV="K=V K=V" its environment (e.g. MALLOC_ARENA_MAX=2).

import { spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { connect as tcpConnect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { startLocalTunnel } from '../hack/local-tunnel.js';
import { KEYS, Probe, vmHWM, type Sample } from './memory-samples.js';
import { runBench } from './bench-main.js';

const env = (name: string, dflt: number): number => Number(process.env[name] ?? dflt);
const SECURE_SILENT = env('FLOOD_SECURE_SILENT', 1500);
const SECURE_SLOW = env('FLOOD_SECURE_SLOW', 1500);
const INSECURE_SLOW = env('FLOOD_INSECURE_SLOW', 2000);
const AGENT_HALF_OPEN = env('FLOOD_AGENT_HALF_OPEN', 1500);
const HOLD_MS = env('FLOOD_HOLD_MS', 10_000);
const AFTER_MS = env('AFTER_MS', 60_000);
const AFTER_STEP_MS = env('AFTER_STEP_MS', 10_000);
const ROUNDS = env('FLOOD_ROUNDS', 1);
const BATCH = 100;
const MB = 1024 * 1024;
const HALF_HEAD = 'GET /containerLogs/ns/pod/c?follow=true HTTP/1.1\r\nHost: edge-1:10250\r\nX-Slow: ';

const words = (text: string | undefined): string[] => (text ?? '').split(' ').filter((a) => a !== '');

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

async function main(): Promise<void> {
  const probe = new Probe((line) => {
    if (process.env.BENCH_VERBOSE === '1') process.stderr.write(`[server] ${line}\n`);
  });
  const holdFlags = ['--tls-handshake-timeout', '10m', '--request-head-timeout', '10m'];
  const local = await startLocalTunnel({
    nodeName: 'edge-1',
    serverArgs: [...(process.env.FLOOD_SERVER_ARGS === undefined ? holdFlags : words(process.env.FLOOD_SERVER_ARGS))],
    serverNodeArgs: ['--import', new URL('./memory-probe.js', import.meta.url).href, ...words(process.env.SERVER_NODE_ARGS)],
    serverEnv: Object.fromEntries(words(process.env.SERVER_ENV).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
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
    for (let round = 1; round <= ROUNDS; round++) {
      const label = (what: string): string => (ROUNDS > 1 ? `${round}: ${what}` : what);
      probe.resetPeak();
      const started = performance.now();
      flood.push(...(await inBatches(SECURE_SILENT, () => tcp(local.securePort))));
      flood.push(
        ...(await inBatches(SECURE_SLOW, async () => {
          const s = await secureCaller();
          s.write(HALF_HEAD);
          return s;
        })),
      );
      flood.push(...(await inBatches(INSECURE_SLOW, () => tcp(local.insecurePort, HALF_HEAD))));
      flood.push(...(await inBatches(AGENT_HALF_OPEN, () => tcp(local.agentPort, hello))));
      openSeconds = (performance.now() - started) / 1000;
      await sleep(HOLD_MS);
      rows.push([label('during'), await probe.next(), descriptors(pid)]);
      where.push(`${label('during')}: ${rssByKind(pid)}`);
      rows.push([label('peak'), { ...probe.peak }, -1]);
      for (const s of flood.splice(0)) s.destroy();
      for (let t = AFTER_STEP_MS; t <= AFTER_MS; t += AFTER_STEP_MS) {
        await sleep(AFTER_STEP_MS);
        rows.push([label(`after ${t / 1000} s`), await probe.next(), descriptors(pid)]);
      }
      where.push(`${label(`after ${AFTER_MS / 1000} s`)}: ${rssByKind(pid)}`);
    }
    const last = rows[rows.length - 1]![1];
    const trimmed = process.env.FLOOD_MALLOC_TRIM === '1' ? mallocTrim(pid) : undefined;

    const callers = SECURE_SILENT + SECURE_SLOW + INSECURE_SLOW + AGENT_HALF_OPEN;
    console.log(
      `server memory, ${ROUNDS > 1 ? `${ROUNDS} floods` : 'a flood'} of ${callers} callers (${SECURE_SILENT} silent TCP on the secure port, ${SECURE_SLOW} slow heads over TLS, ` +
        `${INSECURE_SLOW} slow heads on the insecure port, ${AGENT_HALF_OPEN} half-open TLS on the agent port), opened in ${openSeconds.toFixed(1)} s, ` +
        `held ${HOLD_MS / 1000} s` +
        `${process.env.SERVER_NODE_ARGS ? `; server node args: ${process.env.SERVER_NODE_ARGS}` : ''}` +
        `${process.env.SERVER_ENV ? `; server env: ${process.env.SERVER_ENV}` : ''}`,
    );
    const header = ['', ...KEYS, 'fds'];
    const table = rows.map(([name, s, fds]) => [name, ...KEYS.map((k) => fmt(s[k])), fds < 0 ? '' : String(fds)]);
    const widths = header.map((_, i) => Math.max(...[header, ...table].map((r) => r[i]!.length)));
    for (const r of [header, ...table]) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join('  '));
    const hwm = vmHWM(pid);
    if (hwm !== undefined) console.log(`kernel RSS high-water mark (VmHWM): ${fmt(hwm)}`);
    console.log(`RSS by kind of mapping: ${where.join('; ')}`);
    console.log(`after ${AFTER_MS / 1000} s: RSS ${((last.rss / before.rss - 1) * 100).toFixed(0)} % over its level before the flood`);
    if (trimmed !== undefined) console.log(trimmed);
  } finally {
    for (const s of flood) s.destroy();
    await local.stop();
  }
}

runBench('bench', main);
