// The Node.js options the server runs with, given where it is launched:
// NODE_OPTIONS in manifests/base/server-deployment.yaml, and hack/local-tunnel.ts
// for the tests and the bench (so that they measure the server as deployed).
// A process option, as the agent's (pkg/agent/node-options.ts says why).
//
// --max-semi-space-size=4 (MB): V8's young generation grows to at most 2 × 4 MB
// instead of 2 × 16. The start-up rehearsal alone grew it to 2 × 8, committed
// for good. Alternating `npm run bench -- --only ours --memory-only` and
// `--rtt-only` / `--conn-only` runs (load ~5): server RSS at ready 79 -> 71 MB,
// with 1,000 idle agents 170 -> 161 MB; bulk 281, 301, 215 -> 298, 269, 248
// MiB/s, server CPU per GiB 2.04, 2.08, 2.12 -> 2.00, 1.96, 2.16 s, server +
// agent CPU per connection 0.47, 0.53 -> 0.47, 0.47 ms.

export const SERVER_NODE_OPTIONS: readonly string[] = ['--max-semi-space-size=4'];
