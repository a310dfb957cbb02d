// The floor under bench/link-memory.ts: what one connection costs a bare Node
// server (no code of ours) with the same certificates, layer by layer. A child
// process serves; this one opens connections in steps and reads the child's
// /proc/<pid>/smaps_rollup after a full GC at each step.
//
//   node dist/bench/bare-link-memory.js MODE [options]
//     MODE               tcp | tls (mutual) | h2 (a session) | h2stream (a session and one open stream)
//     --steps 0,300      connections at each step
//     --push N           each stream sends N × 64 KiB, the server reads it (traffic, then idle)
//     --echo             the server writes back what it reads
//     --settle MS        wait before each reading (default 1500)
//     --tls JSON         extra server TLS options, e.g. '{"requestCert":false}', '{"maxVersion":"TLSv1.2"}'
//     --h2 JSON          extra http2.createSecureServer options, e.g. our settings
//     --conn-window N    session.setLocalWindowSize(N) on each server session
//     --trim             then gdb calls malloc_trim(0) in the server

import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import tls from 'node:tls';
import { ensureLocalServerCertificates } from '../pkg/certs/local-store.js';
import { issueAgentCertificate } from '../hack/local-tunnel.js';

type Mode = 'tcp' | 'tls' | 'h2' | 'h2stream';

function anonKiB(pid: number): number {
  const t = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  return Number(/^Anonymous:\s+(\d+) kB/m.exec(t)?.[1] ?? 0);
}

function serve(mode: Mode, pki: string): void {
  const opts = {
    cert: readFileSync(join(pki, 'tunnel-server.crt')),
    key: readFileSync(join(pki, 'tunnel-server.key')),
    ca: readFileSync(join(pki, 'ca.crt')),
    requestCert: true,
    rejectUnauthorized: true,
    ...(JSON.parse(process.env.BARE_TLS ?? '{}') as tls.TlsOptions),
  };
  const kept: unknown[] = [];
  let server: net.Server;
  if (mode === 'tcp') server = net.createServer((s) => kept.push(s));
  else if (mode === 'tls') server = tls.createServer(opts, (s) => kept.push(s));
  else {
    const h2 = http2.createSecureServer({ ...opts, ALPNProtocols: ['h2'], ...(JSON.parse(process.env.BARE_H2 ?? '{}') as http2.SecureServerOptions) });
    h2.on('session', (s) => {
      kept.push(s);
      if (process.env.BARE_CONN_WINDOW) s.setLocalWindowSize(Number(process.env.BARE_CONN_WINDOW));
    });
    h2.on('stream', (st) => {
      st.respond({ ':status': 200 });
      kept.push(st);
      st.on('data', (d: Buffer) => {
        if (process.env.BARE_ECHO === '1') st.write(d);
      });
    });
    server = h2;
  }
  process.on('SIGUSR2', () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    gc?.();
    gc?.();
    process.stdout.write(`mem ${process.memoryUsage().heapUsed}\n`);
  });
  process.on('SIGTERM', () => process.exit(0));
  server.listen(0, '127.0.0.1', () => process.stdout.write(`port ${(server.address() as net.AddressInfo).port}\n`));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const mode = argv[0] as Mode;
  if (argv[1] === 'serve') return serve(mode, argv[2]!);
  if (!['tcp', 'tls', 'h2', 'h2stream'].includes(mode)) throw new Error('MODE: tcp | tls | h2 | h2stream');
  let steps = [0, 300];
  let push = 0;
  let settle = 1500;
  let trim = false;
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--steps') steps = argv[++i]!.split(',').map(Number);
    else if (a === '--push') push = Number(argv[++i]);
    else if (a === '--echo') env.BARE_ECHO = '1';
    else if (a === '--settle') settle = Number(argv[++i]);
    else if (a === '--tls') env.BARE_TLS = argv[++i];
    else if (a === '--h2') env.BARE_H2 = argv[++i];
    else if (a === '--conn-window') env.BARE_CONN_WINDOW = argv[++i];
    else if (a === '--trim') trim = true;
    else throw new Error(`unknown option ${a}`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'yt-bare-linkmem-'));
  const pki = join(dir, 'pki');
  await ensureLocalServerCertificates({ certDir: pki });
  await issueAgentCertificate(pki, 'bare', join(dir, 'agent'));
  const child = spawn(process.execPath, ['--expose-gc', process.argv[1]!, mode, 'serve', pki], { stdio: ['ignore', 'pipe', 'inherit'], env });
  const lines = createInterface({ input: child.stdout });
  let waiter: ((l: string) => void) | undefined;
  lines.on('line', (l) => waiter?.(l));
  const next = (prefix: string): Promise<string> =>
    new Promise((resolve) => {
      waiter = (l) => {
        if (l.startsWith(prefix)) resolve(l.slice(prefix.length));
      };
    });
  const port = Number(await next('port '));
  const pid = child.pid!;
  const client = {
    host: '127.0.0.1',
    port,
    ca: readFileSync(join(dir, 'agent/ca.crt')),
    cert: readFileSync(join(dir, 'agent/tls.crt')),
    key: readFileSync(join(dir, 'agent/tls.key')),
    checkServerIdentity: () => undefined,
  };
  const kept: Array<{ destroy(): void }> = [];
  const open = async (): Promise<void> => {
    if (mode === 'tcp') {
      const s = net.connect(port, '127.0.0.1');
      await new Promise((r) => s.once('connect', r));
      kept.push(s);
    } else if (mode === 'tls') {
      const s = tls.connect(client);
      await new Promise((r, j) => (s.once('secureConnect', r), s.once('error', j)));
      kept.push(s);
    } else {
      const session = http2.connect(`https://127.0.0.1:${port}`, client);
      await new Promise((r, j) => (session.once('connect', r), session.once('error', j)));
      kept.push(session);
      if (mode === 'h2') return;
      const st = session.request({ ':method': 'POST', ':path': '/x' }, { endStream: false });
      await new Promise((r) => st.once('response', r));
      st.resume();
      const block = Buffer.alloc(64 * 1024, 1);
      for (let i = 0; i < push; i++) if (!st.write(block)) await new Promise((r) => st.once('drain', r));
    }
  };
  const readings: Array<{ n: number; anon: number; heap: number }> = [];
  let opened = 0;
  try {
    for (const target of steps) {
      while (opened < target) {
        const batch = Math.min(20, target - opened);
        opened += batch;
        await Promise.all(Array.from({ length: batch }, open));
      }
      await sleep(settle);
      const mem = next('mem ');
      process.kill(pid, 'SIGUSR2');
      readings.push({ n: target, heap: Number(await mem) / 1024, anon: anonKiB(pid) });
    }
    const a = readings[0]!;
    const b = readings.at(-1)!;
    const per = (x: number, y: number): string => ((y - x) / (b.n - a.n)).toFixed(1);
    console.log(`${mode}: per connection KiB: anonymous ${per(a.anon, b.anon)}, V8 heap used ${per(a.heap, b.heap)} (base anonymous ${a.anon} KiB)`);
    if (trim) {
      const r = spawnSync('gdb', ['-p', String(pid), '-batch', '-ex', 'call (int) malloc_trim(0)'], { encoding: 'utf8', timeout: 60_000 });
      console.log(r.status === 0 ? `  after malloc_trim(0): anonymous ${per(a.anon, anonKiB(pid))} per connection` : '  malloc_trim through gdb failed');
    }
  } finally {
    child.kill('SIGTERM');
    for (const k of kept) k.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bare-link-memory failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
