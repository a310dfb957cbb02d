// Why network namespaces cannot be made here, if they cannot: asked by the
// tests that make their own (test/support/netns) and by the local cluster.

import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

let skipReason: string | null | undefined;

/** Why network namespaces cannot be made here (one line), or undefined when they can. Checked once per process. */
export function netnsSkipReason(): string | undefined {
  if (skipReason === undefined) skipReason = probeNetns() ?? null;
  return skipReason ?? undefined;
}

function probeNetns(): string | undefined {
  if (process.platform !== 'linux') return `network namespaces need Linux (this is ${process.platform})`;
  const uid = process.getuid?.() ?? -1;
  if (uid !== 0) return `network namespaces need root (running as uid ${uid})`;
  const name = `yt-probe-${randomBytes(4).toString('hex')}`;
  try {
    execFileSync('ip', ['netns', 'add', name], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err: unknown) {
    if ((err as { code?: unknown }).code === 'ENOENT') return '`ip` (iproute2) is not installed';
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    return `cannot create a network namespace: ${stderr !== undefined && stderr !== '' ? stderr : (err as Error).message}`;
  }
  execFileSync('ip', ['netns', 'del', name]);
  return undefined;
}
