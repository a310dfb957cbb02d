// npm run bench:memory — the agent process's memory under connection churn.
//
// The real server and agent CLIs (the agent loaded with bench/memory-probe,
// which prints process.memoryUsage() every 50 ms), the bench target, and this
// process as the client. Phases:
//   idle    the agent connected, nothing tunnelled;
//   churn   CHURN_CONNECTIONS (default 20,000) short connections, 200 at a
//           time, ending every way (normal close, target closes first, client
//           resets while the target streams, client gives up while the dial
//           is pending), as test/e2e/churn.test.ts;
//   settle  5 s after the churn;
//   hold    HOLD_CONNECTIONS (default 2,000) idle connections open at once,
//           for the bytes one open connection costs.
// Reports RSS (sampled peak and the kernel's high-water mark, VmHWM), heap
// used, external and array buffers. AGENT_NODE_ARGS passes Node/V8 options to
// the agent (e.g. "--max-semi-space-size=4"); AGENT_ARGS passes agent flags.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { REPO_ROOT, startLocalTunnel, startProcess } from '../hack/local-tunnel.js';
import { dialThroughProxier } from '../pkg/interceptor/proxier-dialer.js';
import { KEYS, Probe, vmHWM, type Sample } from './memory-samples.js';
import { runBench } from './bench-main.js';

const TOTAL = Number(process.env.CHURN_CONNECTIONS ?? 20_000);
const CONCURRENCY = 200;
const HOLD = Number(process.env.HOLD_CONNECTIONS ?? 2000);
const SETTLE_MS = 5000;
const MB = 1024 * 1024;

/** A loopback port where connect() hangs (a python3 listener that never accepts, its queue full). */
async function hangingListener(children: ChildProcess[]): Promise<{ port: number; fillers: Socket[] }> {
  const child = spawn(
    'python3',
    ['-c', "import socket,sys\ns=socket.socket();s.bind(('127.0.0.1',0));s.listen(0)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()"],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  children.push(child);
  const [line] = (await once(child.stdout, 'data')) as [Buffer];
  const port = Number(line.toString().trim());
  const fillers: Socket[] = [];
  for (let i = 0; i < 2; i++) {
    const s = connect(port, '127.0.0.1');
    s.on('error', () => {});
    fillers.push(s);
    await sleep(50);
  }
  return { port, fillers };
}

function closed(s: Socket): Promise<void> {
  return s.destroyed ? Promise.resolve() : new Promise((r) => s.once('close', () => r()));
}

function firstData(s: Socket): Promise<void> {
  return new Promise((resolve, reject) => {
    s.once('data', () => resolve());
    s.once('close', () => reject(new Error('closed before any data')));
    s.resume();
  });
}

const fmt = (n: number): string => `${(n / MB).toFixed(1)} MB`;

async function main(): Promise<void> {
  const children: ChildProcess[] = [];
  const probe = new Probe((line) => {
    if (process.env.BENCH_VERBOSE === '1') process.stderr.write(`[agent] ${line}\n`);
  });
  const nodeArgs = (process.env.AGENT_NODE_ARGS ?? '').split(' ').filter((a) => a !== '');
  const agentArgs = (process.env.AGENT_ARGS ?? '').split(' ').filter((a) => a !== '');
  const target = await startProcess(children, join(REPO_ROOT, 'dist/bench/target.js'), [], /^(\d+)\n/);
  const hanging = await hangingListener(children);
  const local = await startLocalTunnel({
    nodeName: 'bench',
    agentArgs: ['--dial-timeout', '60s', ...agentArgs],
    agentNodeArgs: ['--import', new URL('./memory-probe.js', import.meta.url).href, ...nodeArgs],
    onOutput: (who, text) => who === 'agent' && probe.onText(text),
  });
  const agentPid = local.children[1]!.pid!;
  try {
    const address = `127.0.0.1:${Number(target.match[1])}`;
    const dial = (): Promise<Socket> => dialThroughProxier({ udsPath: local.udsPath, address });
    // Warm-up: code paths compiled, TLS session up.
    for (let i = 0; i < 200; i++) {
      const s = await dial();
      s.write('Pw');
      await firstData(s);
      s.destroy();
    }
    await sleep(2000);
    const idle = await probe.next();
    probe.resetPeak();

    const one = async (i: number): Promise<void> => {
      switch (i % 4) {
        case 0: {
          const s = await dial();
          s.write('Phello');
          await firstData(s);
          s.end();
          await closed(s);
          return;
        }
        case 1: {
          const s = await dial();
          s.write('C');
          s.resume();
          await closed(s);
          return;
        }
        case 2: {
          const s = await dial();
          s.write('S');
          await firstData(s);
          s.destroy();
          return;
        }
        default: {
          // Gives up while the agent's dial is pending (the server cancels it with DIAL_CLS).
          const s = connect(local.udsPath);
          s.on('error', () => {});
          s.write(`CONNECT 127.0.0.1:${hanging.port} HTTP/1.1\r\nHost: x\r\n\r\n`);
          await sleep(5);
          s.destroy();
        }
      }
    };
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < TOTAL) await one(next++);
      }),
    );
    const churnSeconds = (performance.now() - started) / 1000;
    await probe.next();
    const churnPeak = { ...probe.peak };
    const hwm = vmHWM(agentPid);
    await sleep(SETTLE_MS);
    const settled = await probe.next();

    // Hold: many idle connections open at once.
    const before = await probe.next();
    const held: Socket[] = [];
    for (let i = 0; i < HOLD; i += 100) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(100, HOLD - i) }, async () => {
          const s = await dial();
          s.write('Ph');
          await firstData(s);
          return s;
        }),
      );
      held.push(...batch);
    }
    await sleep(1000);
    const holding = await probe.next();
    for (const s of held) s.destroy();

    console.log(
      `agent memory, ${TOTAL} churned connections (${CONCURRENCY} at a time) in ${churnSeconds.toFixed(1)} s` +
        ` (${Math.round(TOTAL / churnSeconds)}/s)${nodeArgs.length > 0 ? `; agent node args: ${nodeArgs.join(' ')}` : ''}` +
        `${agentArgs.length > 0 ? `; agent args: ${agentArgs.join(' ')}` : ''}`,
    );
    const header = ['', ...KEYS];
    const rows = [
      ['idle', ...KEYS.map((k) => fmt(idle[k]))],
      ['churn peak', ...KEYS.map((k) => fmt(churnPeak[k]))],
      [`settled (${SETTLE_MS / 1000} s)`, ...KEYS.map((k) => fmt(settled[k]))],
      [`holding ${HOLD}`, ...KEYS.map((k) => fmt(holding[k]))],
    ];
    const widths = header.map((_, i) => Math.max(...[header, ...rows].map((r) => r[i]!.length)));
    for (const r of [header, ...rows]) console.log(r.map((c, i) => c.padEnd(widths[i]!)).join('  '));
    if (hwm !== undefined) console.log(`kernel RSS high-water mark (VmHWM) after churn: ${fmt(hwm)}`);
    const per = (k: keyof Sample): string => `${((holding[k] - before[k]) / HOLD / 1024).toFixed(1)} KiB`;
    console.log(`per open connection: rss ${per('rss')}, heapUsed ${per('heapUsed')}, external ${per('external')}`);
    console.log(`peak RSS growth over idle: ${fmt(churnPeak.rss - idle.rss)}`);
  } finally {
    for (const s of hanging.fillers) s.destroy();
    await local.stop();
    for (const c of children) c.kill('SIGTERM');
  }
}

runBench('bench', main);
