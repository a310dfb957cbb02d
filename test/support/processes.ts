// The real CLIs as child processes, with their output captured line by line.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { AGENT_BIN } from '../../hack/cli-bins.js';
import type { Harness } from './harness.js';

// The bundles that ship (hack/cli-bins.ts checks they are not stale).
export { AGENT_BIN, SERVER_BIN } from '../../hack/cli-bins.js';

export interface Proc {
  child: ChildProcess;
  lines: string[];
  /**
   * Resolves with the first line (seen so far or later) matching `re`. Default limit 30 s: a server CLI making its
   * local CA and serving certificates at start once took over 10 s to say "started" under CI's load.
   */
  waitForLine(re: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves with the exit code (or signal name) once the process has exited. */
  exited: Promise<number | string>;
  kill(signal?: NodeJS.Signals): void;
}

export interface StartOptions {
  /** false: `bin` is an executable of its own, not a script for this Node.js. */
  node?: boolean;
  /** A command the process runs under, e.g. `['ip', 'netns', 'exec', 'ns1']`. */
  prefix?: string[];
  /** Open Node's IPC channel (child.send / 'message'). */
  ipc?: boolean;
}

/**
 * Starts `bin` (a script run by this Node.js, or with `node: false` an
 * executable of its own, such as the Go Konnectivity binaries).
 */
export function startProcess(h: Harness, bin: string, args: string[], env: NodeJS.ProcessEnv = {}, opts: StartOptions = {}): Proc {
  const [plain, plainArgv] = opts.node === false ? [bin, args] : [process.execPath, [bin, ...args]];
  const prefix = opts.prefix ?? [];
  const [command, argv] = prefix.length === 0 ? [plain, plainArgv] : [prefix[0]!, [...prefix.slice(1), plain, ...plainArgv]];
  const child = spawn(command, argv, {
    env: { ...process.env, ...env },
    stdio: opts.ipc === true ? ['ignore', 'pipe', 'pipe', 'ipc'] : ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const watchers: Array<{ re: RegExp; resolve: (l: string) => void }> = [];
  const onText = (buf: Buffer): void => {
    for (const line of buf.toString().split('\n')) {
      if (line === '') continue;
      lines.push(line);
      for (const w of watchers.filter((w) => w.re.test(line))) {
        watchers.splice(watchers.indexOf(w), 1);
        w.resolve(line);
      }
    }
  };
  child.stdout!.on('data', onText);
  child.stderr!.on('data', onText);
  const exited = once(child, 'exit').then(([code, signal]) => (code ?? signal) as number | string);
  h.defer(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  });
  return {
    child,
    lines,
    exited,
    kill: (signal = 'SIGTERM') => child.kill(signal),
    waitForLine(re, timeoutMs = 30_000) {
      const seen = lines.find((l) => re.test(l));
      if (seen !== undefined) return Promise.resolve(seen);
      return new Promise((resolve, reject) => {
        const w = { re, resolve };
        watchers.push(w);
        const timer = setTimeout(() => {
          watchers.splice(watchers.indexOf(w), 1);
          reject(new Error(`no line matching ${re} within ${timeoutMs} ms; output:\n${lines.join('\n')}`));
        }, timeoutMs);
        const resolveOrig = w.resolve;
        w.resolve = (l) => {
          clearTimeout(timer);
          resolveOrig(l);
        };
        void exited.then(() => {
          if (watchers.includes(w)) {
            clearTimeout(timer);
            watchers.splice(watchers.indexOf(w), 1);
            reject(new Error(`process exited before a line matching ${re}; output:\n${lines.join('\n')}`));
          }
        });
      });
    },
  };
}

/** Runs a CLI to completion; returns its exit code and output. */
export async function runProcess(h: Harness, bin: string, args: string[]): Promise<{ code: number | string; output: string }> {
  const p = startProcess(h, bin, args);
  const code = await p.exited;
  return { code, output: p.lines.join('\n') };
}

/** The agent CLI as node edge-1 on 127.0.0.1, dialing `address` with the given certificate files; `extra` flags last. */
export function startEdgeAgentProcess(h: Harness, address: string, files: { caFile: string; certFile: string; keyFile: string }, extra: string[] = []): Proc {
  return startProcess(h, AGENT_BIN, [
    ...['--node-name', 'edge-1', '--node-ip', '127.0.0.1', '--tunnelserver-addr', address, '--meta-port', '0'],
    ...['--ca-file', files.caFile, '--cert-file', files.certFile, '--key-file', files.keyFile],
    ...extra,
  ]);
}

/** How and when a stream ended: its first 'end' or 'error'. */
export interface StreamEnd {
  how: 'end' | 'error';
  err?: Error;
  at: number;
}

/** Watches `stream` for its end; the returned function says it (undefined while it runs). */
export function watchEnd(stream: NodeJS.EventEmitter): () => StreamEnd | undefined {
  let ended: StreamEnd | undefined;
  stream.once('end', () => (ended ??= { how: 'end', at: performance.now() }));
  stream.once('error', (err: Error) => (ended ??= { how: 'error', err, at: performance.now() }));
  return () => ended;
}
