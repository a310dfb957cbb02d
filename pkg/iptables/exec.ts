// The iptables manager's only contact with the system: iptables-save,
// iptables-restore (and their ip6tables twins) and conntrack, run as child
// processes in the process's own network namespace. The backend is chosen as
// kube-proxy's image chooses it: whichever of nft and legacy already holds
// rules (not counting ours), else the one the `iptables` on the PATH uses.

import { execFile } from 'node:child_process';
import { IptablesError } from './errors.js';
import { countOtherRules } from './rules.js';
import type { Family } from './targets.js';

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface CommandRunnerOptions {
  /** The PATH searched for the commands; default the process's. */
  path?: string;
  /** Per command; default 30 s. */
  timeoutMs?: number;
}

const PERMISSION = /permission denied|operation not permitted|you must be root|CAP_NET_ADMIN/i;

export class CommandRunner {
  constructor(private readonly opts: CommandRunnerOptions = {}) {}

  /** Runs `command`; throws an IptablesError only when it cannot be started (missing) or times out. */
  run(command: string, args: string[], input?: string): Promise<CommandResult> {
    return new Promise((resolve, reject) => {
      const env = this.opts.path === undefined ? process.env : { ...process.env, PATH: this.opts.path };
      const child = execFile(command, args, { env, timeout: this.opts.timeoutMs ?? 30_000, maxBuffer: 256 * 1024 * 1024 }, (err, stdout, stderr) => {
        if (err === null) return resolve({ code: 0, stdout, stderr });
        const code = (err as { code?: unknown }).code;
        if (code === 'ENOENT') {
          return reject(new IptablesError('YT_ERR_IPTABLES_MISSING', `${command} is not on the PATH (${env.PATH ?? ''})`, { cause: err }));
        }
        if (typeof code !== 'number') {
          return reject(new IptablesError('YT_ERR_IPTABLES_FAILED', `${command} ${args.join(' ')}: ${err.message}`, { cause: err }));
        }
        resolve({ code, stdout, stderr });
      });
      child.stdin?.on('error', () => {
        // A command that exits before reading its input; its exit status says what happened.
      });
      child.stdin?.end(input);
    });
  }

  /** Runs `command` and returns its stdout; a failure is an IptablesError naming the command, permission failures as such. */
  async must(command: string, args: string[], input?: string): Promise<string> {
    const r = await this.run(command, args, input);
    if (r.code === 0) return r.stdout;
    const detail = r.stderr.trim().split('\n').slice(0, 3).join(' / ');
    if (PERMISSION.test(r.stderr)) {
      const uid = process.getuid?.();
      throw new IptablesError(
        'YT_ERR_IPTABLES_PERMISSION',
        `${command} may not change the nat table: the process needs the NET_ADMIN capability (uid ${uid ?? 'unknown'}; run as root with NET_ADMIN, or set --enable-iptables=false): ${detail}`,
      );
    }
    throw new IptablesError('YT_ERR_IPTABLES_FAILED', `${command} ${args.join(' ')} failed (exit ${r.code}): ${detail}`);
  }
}

export type IptablesMode = 'nft' | 'legacy';

/** The commands of one backend. `mode` is undefined for an iptables without -nft/-legacy variants. */
export interface IptablesBackend {
  mode: IptablesMode | undefined;
  save: Record<Family, string>;
  restore: Record<Family, string>;
  /** Why this one, for the log. */
  reason: string;
}

function backend(mode: IptablesMode | undefined, reason: string): IptablesBackend {
  const suffix = mode === undefined ? '' : `-${mode}`;
  return {
    mode,
    save: { 4: `iptables${suffix}-save`, 6: `ip6tables${suffix}-save` },
    restore: { 4: `iptables${suffix}-restore`, 6: `ip6tables${suffix}-restore` },
    reason,
  };
}

/** `command --version` runs: the command is on the PATH. */
export async function commandExists(runner: CommandRunner, command: string): Promise<boolean> {
  try {
    await runner.run(command, ['--version']);
    return true;
  } catch (err: unknown) {
    if (err instanceof IptablesError && err.code === 'YT_ERR_IPTABLES_MISSING') return false;
    throw err;
  }
}

/** Rules (not ours) in both families of a backend; permission failures throw. */
async function ruleCount(runner: CommandRunner, b: IptablesBackend): Promise<number> {
  let n = countOtherRules(await runner.must(b.save[4], []));
  if (await commandExists(runner, b.save[6])) n += countOtherRules(await runner.must(b.save[6], []));
  return n;
}

/**
 * The backend to use, and every backend present (to clean our leftovers in
 * all of them). Throws YT_ERR_IPTABLES_MISSING when there is no iptables at
 * all, YT_ERR_IPTABLES_PERMISSION when the tables cannot be read.
 */
export async function chooseBackend(runner: CommandRunner): Promise<{ chosen: IptablesBackend; present: IptablesBackend[] }> {
  const present: IptablesBackend[] = [];
  for (const mode of ['nft', 'legacy'] as const) {
    if (await commandExists(runner, `iptables-${mode}-save`)) present.push(backend(mode, ''));
  }
  if (present.length === 0) {
    if (!(await commandExists(runner, 'iptables-save')) || !(await commandExists(runner, 'iptables-restore'))) {
      throw new IptablesError(
        'YT_ERR_IPTABLES_MISSING',
        'neither iptables-save/iptables-restore nor their -nft/-legacy variants are on the PATH: install iptables, or set --enable-iptables=false',
      );
    }
    const only = backend(undefined, 'iptables has no -nft/-legacy variants here');
    await runner.must(only.save[4], ['-t', 'nat']);
    return { chosen: only, present: [only] };
  }
  const counts = new Map<IptablesBackend, number>();
  for (const b of present) counts.set(b, await ruleCount(runner, b));
  const [first, second] = [...present].sort((a, b) => counts.get(b)! - counts.get(a)!);
  const describe = present.map((b) => `${b.mode} ${counts.get(b)}`).join(', ');
  if (second === undefined || counts.get(first!)! > counts.get(second)!) {
    return { chosen: { ...first!, reason: `it holds the most rules (${describe})` }, present };
  }
  // A tie (usually no rules anywhere): the default of the iptables on the PATH.
  let version = '';
  if (await commandExists(runner, 'iptables')) version = (await runner.run('iptables', ['--version'])).stdout;
  const mode: IptablesMode = /legacy/.test(version) ? 'legacy' : 'nft';
  const chosen = present.find((b) => b.mode === mode) ?? present[0]!;
  return { chosen: { ...chosen, reason: `no backend holds more rules (${describe}); \`iptables --version\` says ${version.trim() || 'nothing'}` }, present };
}
