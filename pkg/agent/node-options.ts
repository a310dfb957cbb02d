// The Node.js options the agent runs with, given where it is launched: NODE_OPTIONS
// in manifests/base/agent-daemonset.yaml, and hack/local-tunnel.ts for the tests
// and the bench (so that they measure the agent as deployed). A process option:
// v8.setFlagsFromString at start does not resize a heap already configured.
//
// --max-semi-space-size=1 (MB): V8's young generation stays at 2 × 1 MB instead
// of growing to 2 × 16 MB under traffic or while many connections open, and
// scavenges, which free dead Buffers' memory, come sooner (README, "The agent's
// memory"; bench/README.md, "Memory"). 1 rather than 2: 2 MB less RSS idle and
// with 1,000 idle connections, and no agent CPU per GiB lost.

export const AGENT_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=1'];

/** The Node.js options this process runs with: NODE_OPTIONS, then the command line's (the later wins). */
export function runningNodeOptions(): string {
  const fromEnv = (process.env.NODE_OPTIONS ?? '').split(' ').filter((o) => o !== '');
  return [...fromEnv, ...process.execArgv].join(' ');
}
