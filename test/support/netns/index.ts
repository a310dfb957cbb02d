// Network namespaces for tests (namespace.ts), and what tests do inside them
// with the child in tool.ts: listeners that answer a banner, a TCP probe, and
// a port of one namespace made reachable in another through a Unix socket
// (the file system is shared across network namespaces; loopback is not).

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Harness } from '../harness.js';
import { startProcess, type Proc } from '../processes.js';
import { repoRoot } from '../upstream.js';
import type { NetworkNamespace } from './namespace.js';

export { commandSkipReason, NetworkNamespace, netnsSkipReason, run, vethPair, type RunResult, type VethEnd } from './namespace.js';

export const NETNS_TOOL = join(repoRoot(), 'dist/test/support/netns/tool.js');

export type ProbeResult = { ok: true; data: string } | { ok: false; code: string };

/** Connects from inside `ns` to host:port and reads until the peer closes (5 s at most). */
export async function probeTCP(ns: NetworkNamespace, host: string, port: number): Promise<ProbeResult> {
  const r = await ns.run(process.execPath, [NETNS_TOOL, 'probe', host, String(port)]);
  if (r.code !== 0) throw new Error(`probe of ${host}:${port} in ${ns.name} failed (${r.code}): ${r.stderr.trim()} ${r.stdout.trim()}`);
  return JSON.parse(r.stdout) as ProbeResult;
}

export interface BannerListener {
  host: string;
  port: number;
  /** Written to every connection, which is then closed. */
  banner: string;
}

/** Listeners inside `ns` (or the root namespace for undefined) that answer their banner; up when this resolves. */
export async function startBanners(h: Harness, ns: NetworkNamespace | undefined, listeners: BannerListener[]): Promise<Proc> {
  const args = ['banner', JSON.stringify(listeners)];
  const proc = ns === undefined ? startProcess(h, NETNS_TOOL, args) : ns.startProcess(h, NETNS_TOOL, args);
  await proc.waitForLine(/^ready$/);
  return proc;
}

/**
 * Makes host:port of namespace `from` reachable as the same host:port inside
 * `to` (undefined is the root namespace): e.g. a kube-apiserver on the root's
 * loopback for a server inside a namespace, or the reverse for kubectl.
 */
export async function exposePort(h: Harness, opts: { from?: NetworkNamespace; to?: NetworkNamespace; host?: string; port: number }): Promise<void> {
  const host = opts.host ?? '127.0.0.1';
  const tcp = host.includes(':') ? `tcp:[${host}]:${opts.port}` : `tcp:${host}:${opts.port}`;
  const dir = await mkdtemp(join(tmpdir(), 'yt-expose-'));
  h.defer(() => rm(dir, { recursive: true, force: true }));
  const socket = `unix:${join(dir, 'port.sock')}`;
  const start = (ns: NetworkNamespace | undefined, args: string[]): Proc =>
    ns === undefined ? startProcess(h, NETNS_TOOL, args) : ns.startProcess(h, NETNS_TOOL, args);
  await start(opts.from, ['forward', socket, tcp]).waitForLine(/^ready$/);
  await start(opts.to, ['forward', tcp, socket]).waitForLine(/^ready$/);
}
