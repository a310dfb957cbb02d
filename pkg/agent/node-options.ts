// The Node.js options the agent runs with, given where it is launched: NODE_OPTIONS
// in manifests/base/agent-daemonset.yaml, and hack/local-tunnel.ts for the tests
// and the bench (so that they measure the agent as deployed). A process option:
// v8.setFlagsFromString at start does not resize a heap already configured.
//
// --max-semi-space-size=1 (MB): V8's young generation stays at 2 × 1 MB instead
// of growing to 2 × 16 MB under traffic or while many connections open, and
// scavenges, which free dead Buffers' memory, come sooner (docs/operating.md,
// "Node and V8 options"). 1 rather than 2: 2 MB less RSS idle and
// with 1,000 idle connections, and no agent CPU per GiB lost.
//
// --v8-pool-size=1: one V8 worker thread instead of Node's four. Each thread
// that compiles or collects for V8 gets a glibc malloc arena of its own, and
// the arenas of four kept ~1.7 MB of TurboFan's freed zones resident after
// the start-up rehearsal (smaps: one arena holds 0.3-0.6 MB). Agent RSS at
// ready 63.5-65.4 -> 61.9-62.5 MB, with 1,000 idle connections 66.5-66.8 ->
// 65.2-65.5 MB.

export const AGENT_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=1', '--v8-pool-size=1'];

/** The Node.js options this process runs with: NODE_OPTIONS, then the command line's (the later wins). */
export function runningNodeOptions(): string {
  const fromEnv = (process.env.NODE_OPTIONS ?? '').split(' ').filter((o) => o !== '');
  return [...fromEnv, ...process.execArgv].join(' ');
}
