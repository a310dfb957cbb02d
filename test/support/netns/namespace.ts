// Network namespaces for tests that change what the root namespace must never
// see changed (iptables, routes, addresses, resolv.conf): each test makes its
// own with a random name, links them with veth pairs, runs children inside,
// and deletes them on cleanup, also when the test fails or the process exits.
//
//   const skip = netnsSkipReason();            // one line, or undefined
//   const cloud = await NetworkNamespace.create(h, 'cloud');
//   const edge = await NetworkNamespace.create(h, 'edge');
//   await vethPair({ ns: cloud, name: 'to-edge', addresses: ['10.1.0.1/30'] }, { ns: edge, name: 'to-cloud', addresses: ['10.1.0.2/30'] });
//   await cloud.run('iptables-save', []);      // runs inside, never throws
//   cloud.startProcess(h, script, args);       // a Node.js child inside (test/support/processes.ts)

import { execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants } from 'node:os';
import type { Harness } from '../harness.js';
import { startProcess, type Proc, type StartOptions } from '../processes.js';

export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion; never throws for a non-zero exit (code 127: not found). */
export function run(command: string, args: string[], opts: { timeoutMs?: number; input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = execFile(
      command,
      args,
      { timeout: opts.timeoutMs ?? 30_000, maxBuffer: 64 * 1024 * 1024, env: opts.env ?? process.env },
      (err, stdout, stderr) => {
        let code = 0;
        if (err !== null) {
          const { code: c, signal } = err as { code?: unknown; signal?: NodeJS.Signals | null };
          code = typeof c === 'number' ? c : c === 'ENOENT' ? 127 : signal ? 128 + constants.signals[signal] : 1;
          // Without an exit code the cause is the signal or the spawn's own error: say which, or the failure reads as empty.
          if (code === 127 && stderr === '') stderr = `${command}: not found`;
          else if (typeof c !== 'number') stderr += `${stderr === '' ? '' : '\n'}${signal ? `killed by ${signal}` : err.message}`;
        }
        resolve({ code, stdout, stderr });
      },
    );
    child.stdin?.end(opts.input);
  });
}

async function must(command: string, args: string[]): Promise<string> {
  const r = await run(command, args);
  if (r.code !== 0) throw new Error(`${command} ${args.join(' ')} failed (${r.code}): ${r.stderr.trim()}`);
  return r.stdout;
}

/** Why `command` cannot be run here (one line), or undefined when `command --version` works. */
export function commandSkipReason(command: string, hint: string): string | undefined {
  try {
    execFileSync(command, ['--version'], { stdio: 'ignore' });
    return undefined;
  } catch (err: unknown) {
    return (err as { code?: unknown }).code === 'ENOENT' ? `${command} is not installed (${hint})` : `${command} --version failed: ${(err as Error).message}`;
  }
}

// Whether namespaces can be made here is the local cluster's question too (hack/cluster/netns-check.ts).
export { netnsSkipReason } from '../../../hack/cluster/netns-check.js';

/** Namespaces not yet deleted, deleted synchronously if the process exits first (a crash, a timeout). */
const live = new Set<NetworkNamespace>();
let exitHook = false;

function deleteOnExit(ns: NetworkNamespace): void {
  live.add(ns);
  if (exitHook) return;
  exitHook = true;
  process.on('exit', () => {
    for (const left of live) {
      try {
        execFileSync('ip', ['netns', 'del', left.name], { stdio: 'ignore' });
      } catch {
        // Already gone, or nothing more can be done while exiting.
      }
    }
  });
}

export class NetworkNamespace {
  private readonly procs: Proc[] = [];
  private closing: Promise<void> | undefined;

  private constructor(readonly name: string) {}

  /**
   * A new namespace named `<prefix>-<random>` with its loopback up, deleted
   * when the test ends (after the children started in it are killed).
   */
  static async create(h: Harness, prefix = 'yt'): Promise<NetworkNamespace> {
    const ns = new NetworkNamespace(`${prefix}-${randomBytes(4).toString('hex')}`);
    await must('ip', ['netns', 'add', ns.name]);
    deleteOnExit(ns);
    h.defer(() => ns.close());
    await ns.ip('link', 'set', 'lo', 'up');
    return ns;
  }

  /** The command that runs another inside the namespace: `ip netns exec <name>`. */
  get execPrefix(): string[] {
    return ['ip', 'netns', 'exec', this.name];
  }

  /** `command args` inside the namespace; never throws for a non-zero exit. */
  run(command: string, args: string[], opts: { timeoutMs?: number; input?: string; env?: NodeJS.ProcessEnv } = {}): Promise<RunResult> {
    return run('ip', ['netns', 'exec', this.name, command, ...args], opts);
  }

  /** Like run(), but throws with the command's stderr when it fails; returns stdout. */
  async must(command: string, args: string[], input?: string): Promise<string> {
    const r = await this.run(command, args, input === undefined ? {} : { input });
    if (r.code !== 0) throw new Error(`${command} ${args.join(' ')} in ${this.name} failed (${r.code}): ${r.stderr.trim()}`);
    return r.stdout;
  }

  /** `ip <args>` applied to this namespace (`ip -n <name> ...`); throws on failure. */
  ip(...args: string[]): Promise<string> {
    return must('ip', ['-n', this.name, ...args]);
  }

  /** Adds `cidr` (e.g. `10.1.0.5/32`, `fd00::5/64`) to `dev` (`lo` takes extra addresses too); IPv6 ones usable at once (no DAD). */
  async addAddress(dev: string, cidr: string): Promise<void> {
    await this.ip('addr', 'add', cidr, 'dev', dev, ...(cidr.includes(':') ? ['nodad'] : []));
  }

  /** A process inside the namespace (a Node.js script unless opts.node is false), killed when the test ends. */
  startProcess(h: Harness, bin: string, args: string[], env: NodeJS.ProcessEnv = {}, opts: StartOptions = {}): Proc {
    const proc = startProcess(h, bin, args, env, { ...opts, prefix: ['ip', 'netns', 'exec', this.name, ...(opts.prefix ?? [])] });
    this.procs.push(proc);
    return proc;
  }

  /** Kills what runs inside (SIGKILL), then deletes the namespace and with it its links. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (const p of this.procs) {
        if (p.child.exitCode === null && p.child.signalCode === null) p.kill('SIGKILL');
      }
      await Promise.all(this.procs.map((p) => p.exited));
      await must('ip', ['netns', 'del', this.name]);
      live.delete(this);
    })();
    return this.closing;
  }
}

export interface VethEnd {
  ns: NetworkNamespace;
  /** Interface name inside `ns` (at most 15 characters). */
  name: string;
  /** Addresses with their prefix length, e.g. `10.1.0.1/30`. */
  addresses?: string[];
}

/**
 * A veth pair from `a` to `b`, both ends up with their addresses. The pair is
 * made inside a's namespace and its peer created in b's, so the root
 * namespace never holds either end. Both ends may be in one namespace.
 */
export async function vethPair(a: VethEnd, b: VethEnd): Promise<void> {
  for (const end of [a, b]) {
    if (end.name.length > 15) throw new TypeError(`interface name ${end.name} is longer than 15 characters`);
  }
  await a.ns.ip('link', 'add', a.name, 'type', 'veth', 'peer', 'name', b.name, ...(a.ns === b.ns ? [] : ['netns', b.ns.name]));
  for (const end of [a, b]) {
    for (const cidr of end.addresses ?? []) await end.ns.addAddress(end.name, cidr);
    await end.ns.ip('link', 'set', end.name, 'up');
  }
}
