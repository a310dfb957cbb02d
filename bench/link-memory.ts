// Where an idle agent link's memory goes on our server: one server, agent links
// added in steps from agent-swarm processes (one process per step), and after
// each step (links settled, a full GC) the server's RSS split into anonymous
// and file pages (/proc/<pid>/smaps_rollup), V8's heap by space, and what Node
// counts outside it (external, arrayBuffers). The slope per link between the
// first and last step is what each link costs. --no-gc samples the heap as it
// is (the young generation grown by the links' arrival included), as the scale
// bench sees it.
//
//   node dist/bench/link-memory.js [--links 0,200,400] [--settle 3] [--trim] [--resume MS] [--no-gc] [--node-args "…"] [--env "K=V …"] [--snapshots DIR] [-- server flags…]
//
// With --snapshots, a heap snapshot at every step (compare two in DevTools, or
// with `node dist/bench/heap-diff.js A B`). With --trim, gdb calls
// malloc_trim(0) in the server after each step: what RSS drops by is memory
// glibc keeps freed, not memory in use.

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { ensureLocalServerCertificates } from '../pkg/certs/local-store.js';
import { REPO_ROOT, issueAgentCertificate, startLocalTunnel } from '../hack/local-tunnel.js';
import { loadAverage } from './proc.js';
import { SWARM_SERVER_ARGS } from './scale.js';

const KiB = 1024;

interface Sample {
  links: number;
  rss: number;
  anon: number;
  file: number;
  heapUsed: number;
  heapCommitted: number;
  external: number;
  arrayBuffers: number;
  spaces: Record<string, { used: number; committed: number }>;
  /** Anonymous memory after malloc_trim(0), with --trim. */
  trimmedAnon?: number;
}

function smaps(pid: number): { rss: number; anon: number; file: number } {
  const t = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (k: string): number => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(t)?.[1] ?? 0) * KiB;
  return { rss: kb('Rss'), anon: kb('Anonymous'), file: kb('Rss') - kb('Anonymous') };
}

async function swarm(agentPort: number, first: number, count: number, certDir: string, resumeMs: number): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    [join(REPO_ROOT, 'dist/bench/agent-swarm.js'), `127.0.0.1:${agentPort}`, String(first), String(count), certDir, String(resumeMs)],
    {
      stdio: ['pipe', 'pipe', 'inherit'],
    },
  );
  const lines = createInterface({ input: child.stdout });
  await new Promise<void>((resolve, reject) => {
    lines.on('line', (l) => {
      if (l.startsWith('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`agent swarm exited with ${code}`)));
  });
  return child;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  let steps = [0, 200, 400];
  let settleS = 3;
  let snapshots: string | undefined;
  let trim = false;
  let resumeMs = 0;
  const serverEnv: NodeJS.ProcessEnv = {};
  const nodeArgs: string[] = [];
  const serverArgs: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--links') steps = argv[++i]!.split(',').map(Number);
    else if (a === '--settle') settleS = Number(argv[++i]);
    else if (a === '--snapshots') snapshots = argv[++i];
    else if (a === '--trim') trim = true;
    else if (a === '--resume') resumeMs = Number(argv[++i]);
    else if (a === '--no-gc') serverEnv.YT_PROBE_NO_GC = '1';
    else if (a === '--node-args') nodeArgs.push(...argv[++i]!.split(' '));
    else if (a === '--env') for (const kv of argv[++i]!.split(' ')) serverEnv[kv.slice(0, kv.indexOf('='))] = kv.slice(kv.indexOf('=') + 1);
    else if (a === '--') {
      serverArgs.push(...argv.slice(i + 1));
      break;
    } else throw new Error(`unknown option ${a}`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'yt-linkmem-'));
  const certDir = join(dir, 'pki');
  await ensureLocalServerCertificates({ certDir });
  await issueAgentCertificate(certDir, 'swarm', join(dir, 'swarm'));
  let probeText = '';
  let waiter: ((line: string) => void) | undefined;
  const local = await startLocalTunnel({
    certDir,
    agent: false,
    serverArgs: [...SWARM_SERVER_ARGS, ...serverArgs],
    serverNodeArgs: [...nodeArgs, '--expose-gc', '--import', join(REPO_ROOT, 'dist/bench/link-memory-probe.js')],
    serverEnv: snapshots === undefined ? serverEnv : { ...serverEnv, YT_HEAP_SNAPSHOT_DIR: snapshots },
    onOutput: (_who, text) => {
      probeText += text;
      let nl: number;
      while ((nl = probeText.indexOf('\n')) >= 0) {
        const line = probeText.slice(0, nl);
        probeText = probeText.slice(nl + 1);
        if (line.startsWith('yt-linkmem ')) waiter?.(line.slice('yt-linkmem '.length));
      }
    },
  });
  const pid = local.children[0]!.pid!;
  const swarms: ChildProcess[] = [];
  const samples: Sample[] = [];
  process.stderr.write(`load average at start ${loadAverage()}\n`);
  try {
    let links = 0;
    for (const target of steps) {
      if (target > links) {
        swarms.push(await swarm(local.agentPort, links, target - links, join(dir, 'swarm'), resumeMs));
        links = target;
      }
      await sleep(settleS * 1000);
      const line = new Promise<string>((r) => (waiter = r));
      process.kill(pid, 'SIGUSR2');
      const m = JSON.parse(await line) as { heapUsed: number; external: number; arrayBuffers: number; spaces: Sample['spaces'] };
      const heapCommitted = Object.values(m.spaces).reduce((s, x) => s + x.committed, 0);
      samples.push({ links, ...smaps(pid), heapUsed: m.heapUsed, heapCommitted, external: m.external, arrayBuffers: m.arrayBuffers, spaces: m.spaces });
      const s = samples.at(-1)!;
      if (trim) {
        const r = spawnSync('gdb', ['-p', String(pid), '-batch', '-ex', 'call (int) malloc_trim(0)'], { encoding: 'utf8', timeout: 60_000 });
        const t = smaps(pid);
        process.stderr.write(
          r.status === 0
            ? `  after malloc_trim(0): RSS ${(t.rss / 2 ** 20).toFixed(1)} MiB, anon ${(t.anon / 2 ** 20).toFixed(1)}\n`
            : `  malloc_trim through gdb failed\n`,
        );
        s.trimmedAnon = t.anon;
      }
      process.stderr.write(
        `${links} links: RSS ${(s.rss / 2 ** 20).toFixed(1)} MiB (anon ${(s.anon / 2 ** 20).toFixed(1)}, file ${(s.file / 2 ** 20).toFixed(1)}), ` +
          `heap used ${(s.heapUsed / 2 ** 20).toFixed(1)} committed ${(s.heapCommitted / 2 ** 20).toFixed(1)}, external ${(s.external / 2 ** 20).toFixed(1)}, arrayBuffers ${(s.arrayBuffers / 2 ** 20).toFixed(1)}\n`,
      );
    }
  } finally {
    for (const c of swarms) {
      if (c.exitCode !== null) continue;
      c.stdin!.end();
      await once(c, 'exit');
    }
    await local.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const a = samples[0]!;
  const b = samples.at(-1)!;
  const n = b.links - a.links;
  if (n <= 0) return;
  const per = (x: number, y: number): string => ((y - x) / n / KiB).toFixed(1);
  const native = (s: Sample): number => s.anon - s.heapCommitted;
  console.log(`per link, ${a.links} → ${b.links} links (KiB): RSS ${per(a.rss, b.rss)}, anonymous ${per(a.anon, b.anon)}, file ${per(a.file, b.file)}`);
  console.log(
    `  V8 heap used ${per(a.heapUsed, b.heapUsed)}, committed ${per(a.heapCommitted, b.heapCommitted)}; anonymous outside V8's heap ${per(native(a), native(b))}`,
  );
  if (a.trimmedAnon !== undefined && b.trimmedAnon !== undefined) console.log(`  anonymous after malloc_trim(0) ${per(a.trimmedAnon, b.trimmedAnon)}`);
  console.log(`  external ${per(a.external, b.external)}, arrayBuffers ${per(a.arrayBuffers, b.arrayBuffers)}`);
  for (const k of Object.keys(b.spaces)) {
    console.log(`  ${k}: used ${per(a.spaces[k]!.used, b.spaces[k]!.used)}, committed ${per(a.spaces[k]!.committed, b.spaces[k]!.committed)}`);
  }
  console.log(`load average at end ${loadAverage()}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`link-memory failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
