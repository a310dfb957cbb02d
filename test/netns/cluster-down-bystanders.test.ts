// `npm run cluster -- down` (hack/cluster/procs.ts) ends every process in a
// node's mount or network namespace. The kernel frees a namespace's number with
// its last process and gives it to the next namespace made anywhere, and every
// `ip netns exec` makes a mount namespace: a probe of the iptables test,
// started while the real-cluster test's `down` waited for kube-apiserver, took
// an edge node's old number and was killed (CI: "probe of 10.251.0.3:9100 …
// failed (1): "). Here two stand-in nodes are stopped while other processes
// start beside them, and only the nodes' processes may end.

import assert from 'node:assert/strict';
import { readlinkSync } from 'node:fs';
import { test } from 'node:test';
import { stopAll } from '../../hack/cluster/procs.js';
import type { ClusterState, NodeState } from '../../hack/cluster/state.js';
import { harness } from '../support/harness.js';
import { NetworkNamespace, netnsSkipReason } from '../support/netns/index.js';
import type { Proc } from '../support/processes.js';

const skip = netnsSkipReason();

/** `script` under sh inside `ns` (in a mount namespace of its own, as `ip netns exec` makes one), once it has said ready. */
async function startIn(h: Parameters<typeof NetworkNamespace.create>[0], ns: NetworkNamespace, script: string): Promise<Proc> {
  const p = ns.startProcess(h, 'sh', ['-c', `echo ready; ${script}`], {}, { node: false });
  await p.waitForLine(/^ready$/, 30_000);
  return p;
}

const nsOf = (p: Proc, kind: 'mnt' | 'net'): string => readlinkSync(`/proc/${p.child.pid}/ns/${kind}`);

function node(name: string, holder: Proc): NodeState {
  return { name, netns: 'unused', address: '', holderPid: holder.child.pid!, mntNS: nsOf(holder, 'mnt'), netNS: nsOf(holder, 'net'), processes: [] };
}

const running = (p: Proc): boolean => p.child.exitCode === null && p.child.signalCode === null;

/** Whether `p` has ended within `ms` (its exit is seen a little after the signal that ends it). */
async function endsWithin(p: Proc, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), ms)));
  const ended = await Promise.race([p.exited.then(() => true), late]);
  clearTimeout(timer);
  return ended;
}

test("down ends what runs in a node's namespaces, and no process that was given the number of a node's ended namespace", { skip }, async (t) => {
  const h = harness(t);
  const nodes = await NetworkNamespace.create(h, 'yt-down');
  const elsewhere = await NetworkNamespace.create(h, 'yt-beside');
  // Node quick's holder ends at the first SIGTERM, and its mount namespace with it; node slow ignores SIGTERM, so
  // down waits out its grace period (as it waits for kube-apiserver and etcd), and the test starts processes meanwhile.
  const quick = await startIn(h, nodes, 'exec sleep 60');
  const slow = await startIn(h, nodes, "trap '' TERM; while :; do sleep 1; done");
  // Not recorded anywhere: found by the nodes' network namespace.
  const unrecorded = await startIn(h, nodes, 'exec sleep 60');
  const state: ClusterState = { startedAt: '', netns: [], mountPoints: [], cgroups: [], nodes: [node('quick', quick), node('slow', slow)] };

  const stopping = stopAll(state, [], 4000);
  await quick.exited;
  const beside: Array<{ proc: Proc; mnt: string }> = [];
  for (let i = 0; i < 8; i++) {
    const proc = await startIn(h, elsewhere, 'exec sleep 60');
    beside.push({ proc, mnt: nsOf(proc, 'mnt') });
  }
  const { killed, stuck } = await stopping;

  const reused = beside.filter((b) => b.mnt === state.nodes[0]!.mntNS).length;
  t.diagnostic(`node quick had ${state.nodes[0]!.mntNS}; processes started beside down got it: ${reused} of ${beside.length}`);
  for (const p of [quick, slow, unrecorded]) assert.ok(await endsWithin(p, 5000), `${p.child.pid} of the nodes has ended`);
  assert.ok(killed.length > 0, 'node slow outlived SIGTERM and was killed');
  assert.deepEqual(stuck, []);
  // A process killed by mistake has ended by now, or its exit is still on its way: a moment for that.
  await Promise.race(beside.map((b) => endsWithin(b.proc, 500)));
  for (const [i, b] of beside.entries()) {
    assert.ok(
      running(b.proc),
      `process ${i} started beside down (${b.mnt}) is no node's, yet it was ended (${b.proc.child.signalCode ?? b.proc.child.exitCode})`,
    );
  }
});
