// kubectl for the local cluster: kube-apiserver listens only inside the cloud
// namespace, so kubectl runs there (`nsenter --net`), with the admin
// kubeconfig. `up` writes the same as a script, <state>/kubectl, for users.

import { execFile } from 'node:child_process';
import { chmodSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { findControlPlane } from './binaries.js';
import { ADMIN_KUBECONFIG, KUBECTL_WRAPPER } from './state.js';
import { CLOUD } from './topology.js';

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

function kubectlBin(): string {
  const found = findControlPlane();
  return 'missing' in found ? 'kubectl' : found.kubectl;
}

/** The command line a user runs (also what the wrapper script execs). */
export function kubectlCommand(): string[] {
  return ['nsenter', `--net=/run/netns/${CLOUD.netns}`, '--', kubectlBin(), `--kubeconfig=${ADMIN_KUBECONFIG}`];
}

export function writeKubectlWrapper(): void {
  const quoted = kubectlCommand().map((a) => `'${a}'`);
  writeFileSync(KUBECTL_WRAPPER, `#!/bin/sh\n# kubectl for the local cluster (npm run cluster -- status)\nexec ${quoted.join(' ')} "$@"\n`);
  chmodSync(KUBECTL_WRAPPER, 0o755);
}

/** Runs kubectl as the administrator; never throws for a non-zero exit. */
export function kubectl(args: string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<KubectlResult> {
  const [command, ...prefix] = kubectlCommand();
  return new Promise((resolve) => {
    const child = execFile(command!, [...prefix, ...args], { timeout: opts.timeoutMs ?? 30_000, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1;
      resolve({ code, stdout, stderr });
    });
    child.stdin?.end(opts.input);
  });
}

/** Like kubectl(), but throws with kubectl's message on failure; resolves stdout. */
export async function mustKubectl(args: string[], input?: string): Promise<string> {
  const r = await kubectl(args, input === undefined ? {} : { input });
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed (${r.code}): ${r.stderr.trim()}`);
  return r.stdout;
}

/** Polls `check` (every 500 ms) until it resolves a value other than undefined, or throws after `timeoutMs` with `what` and the last state. */
export async function waitFor<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>, describe?: () => Promise<string>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s${describe === undefined ? '' : `\n${await describe()}`}`);
    await sleep(500);
  }
}
