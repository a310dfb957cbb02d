// The local cluster of real parts (hack/cluster, what `npm run cluster -- up`
// makes), brought up by the same code: three real kubelets Ready with their
// labels and InternalIPs, a busybox pod Running on each (its hostPaths its
// node's own files, never the machine's), our image running on a node, edge
// nodes behind NAT (kube-apiserver reaches the cloud node's kubelet, never an
// edge node's: the gap the tunnel fills); then `down`, and a check,
// independent of down's own, that nothing is left.
//
// Then each route deployed from the manifests by `npm run cluster -- deploy`'s
// code, one after the other on the same cluster (egress-selector, then
// iptables, then dns with dnsmasq in the cloud node serving the DNS
// controller's records to kube-apiserver), and every kubectl command users
// run (test/support/kubectl-matrix.ts) against a pod on each edge node and on
// the cloud node; on the egress-selector route once more with the server
// gone, where every one of them must fail. On the iptables route, life events
// with `logs -f` running (an agent pod deleted, a NAT router's outage,
// kubelets restarted); on the DNS route, a second cloud node and a rollout
// restart of two server replicas. The figures (apply → first logs, memory and
// CPU) are printed as one table.
//
// Root only (network namespaces, mounts, cgroups). About 60 s to `up` with our
// image's archive cached (CACHE_DIR), a minute more when the image is built,
// and about 8 minutes for the rest on a loaded 2-core machine.

import assert from 'node:assert/strict';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { findClusterBinaries } from '../../hack/cluster/binaries.js';
import { deploy, ROUTES } from '../../hack/cluster/deploy.js';
import { DNS_HOSTS_FILE } from '../../hack/cluster/dns-resolver.js';
import { down } from '../../hack/cluster/down.js';
import { privatePath } from '../../hack/cluster/holder.js';
import { BUSYBOX_IMAGE, LOCAL_IMAGE } from '../../hack/cluster/images.js';
import { kubectl, mustKubectl, waitFor } from '../../hack/cluster/kubectl.js';
import { listNodes } from '../../hack/cluster/nodes.js';
import { clusterSkipReason } from '../../hack/cluster/requirements.js';
import { readState, STATE_DIR, type ClusterState, type NodeState } from '../../hack/cluster/state.js';
import { CLOUD, CLOUD_2, NODES, PREFIX, ROUTERS, type NodeSpec } from '../../hack/cluster/topology.js';
import { up } from '../../hack/cluster/up.js';
import { restartKubelet } from '../../hack/cluster/kubelet.js';
import { addSecondCloudNode } from '../../hack/cluster/second-cloud-node.js';
import { inNetns } from '../../hack/cluster/network.js';
import { resourceFigures, sampleResources, sampleResourcesAfter, type ResourceFigure } from '../support/cluster-figures.js';
import { followLogs, gapsAndRepeats, logsTimeline, logsWorkAfter, longestGap, type StreamEnd } from '../support/cluster-life-events.js';
import { run } from '../../hack/image.js';
import { expectedMatrix, foldMatrix, matrixPod, matrixPodName, runMatrix } from '../support/kubectl-matrix.js';
import { NETNS_TOOL, type ProbeResult } from '../support/netns/index.js';

const skip = clusterSkipReason();

/** A folder in /var/lib that the pods make through a hostPath: it must land in each node's private /var/lib. */
const HOSTPATH_DIR = '/var/lib/ytc-hostpath-probe';

interface PodSpec {
  apiVersion: 'v1';
  kind: 'Pod';
  metadata: { name: string; namespace: string };
  spec: { nodeName: string; restartPolicy: string; containers: object[]; volumes?: object[] };
}

function pod(name: string, node: string, image: string, command: string[], restartPolicy = 'Always'): PodSpec {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default' },
    spec: { nodeName: node, restartPolicy, containers: [{ name: 'c', image, imagePullPolicy: 'Never', command }] },
  };
}

/** A busybox pod that copies its node's kubelet.conf (a hostPath file, as the agent mounts it) into a hostPath folder. */
function hostPathPod(node: string): PodSpec {
  const script = `echo hello from ${node}; cp /kubelet.conf /out/kubelet.conf; echo ${node} > /out/node; exec sleep 3600`;
  const p = pod(`bb-${node}`, node, BUSYBOX_IMAGE, ['sh', '-c', script]);
  p.spec.containers = [
    {
      name: 'c',
      image: BUSYBOX_IMAGE,
      imagePullPolicy: 'Never',
      command: ['sh', '-c', script],
      volumeMounts: [
        { name: 'conf', mountPath: '/kubelet.conf', readOnly: true },
        { name: 'out', mountPath: '/out' },
      ],
    },
  ];
  p.spec.volumes = [
    { name: 'conf', hostPath: { path: '/etc/kubernetes/kubelet.conf', type: 'File' } },
    { name: 'out', hostPath: { path: HOSTPATH_DIR, type: 'DirectoryOrCreate' } },
  ];
  return p;
}

interface PodStatus {
  phase?: string;
  containerStatuses?: { state?: { terminated?: { exitCode: number } } }[];
}

async function podStatus(name: string): Promise<PodStatus> {
  const r = await kubectl(['get', 'pod', name, '-o', 'jsonpath={.status}']);
  return r.code === 0 && r.stdout !== '' ? (JSON.parse(r.stdout) as PodStatus) : {};
}

/** A TCP connection from inside the network namespace `netns` (the netns tests' probe). */
async function probeFrom(netns: string, host: string, port: number): Promise<ProbeResult> {
  const out = await run('nsenter', [`--net=/run/netns/${netns}`, '--', process.execPath, NETNS_TOOL, 'probe', host, String(port)]);
  return JSON.parse(out) as ProbeResult;
}

const escape = (ip: string): string => ip.replaceAll('.', '\\.');

/** The entries of the root file system's folders a node has private parts of (nothing may be added there). */
function rootListing(): string[] {
  return ['/etc', '/var/lib', '/var/log', '/run'].flatMap((dir) => readdirSync(dir).map((name) => join(dir, name)));
}

/** What of the cluster is left on this machine, looked up afresh (not through down's own check). */
function leftOnMachine(pidsBefore: Set<string>): string[] {
  const left: string[] = [];
  for (const ns of readdirSync('/run/netns')) if (ns.startsWith(PREFIX)) left.push(`netns ${ns}`);
  const ours = ['kubelet', 'kube-proxy', 'kube-scheduler', 'containerd', 'containerd-shim-runc-v2'];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p) && !pidsBefore.has(p))) {
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
    } catch {
      continue;
    }
    const exe = cmdline.split(' ')[0]!.split('/').pop()!;
    if (cmdline.includes(STATE_DIR) || ours.includes(exe)) left.push(`process ${pid} ${cmdline.slice(0, 100)}`);
  }
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const at = line.split(' ')[4] ?? '';
    if ([STATE_DIR, '/var/lib/kubelet', '/var/lib/containerd', '/run/containerd', '/etc/kubernetes'].some((p) => at.startsWith(p))) left.push(`mount ${at}`);
  }
  for (const h of readdirSync('/sys/fs/cgroup')) {
    for (const node of [...NODES, CLOUD_2]) if (existsSync(join('/sys/fs/cgroup', h, `${PREFIX}${node.name}`))) left.push(`cgroup ${h}/${PREFIX}${node.name}`);
  }
  if (existsSync(STATE_DIR)) left.push(`folder ${STATE_DIR}`);
  return left;
}

const secs = (ms: number | undefined): string => (ms === undefined ? 'never' : `${(ms / 1000).toFixed(1)} s`);

/** The agent pods on `node` (a deleted one while it drains, its replacement). */
async function agentPodsOn(node: string): Promise<{ name: string; ready: boolean }[]> {
  const out = await mustKubectl([
    '-n',
    'kube-system',
    'get',
    'pods',
    '-l',
    'k8s-app=yurt-tunnel-agent',
    `--field-selector=spec.nodeName=${node}`,
    '-o',
    'json',
  ]);
  const list = JSON.parse(out) as {
    items: { metadata: { name: string; deletionTimestamp?: string }; status: { conditions?: { type: string; status: string }[] } }[];
  };
  return list.items.map((p) => ({
    name: `pod/${p.metadata.name}`,
    ready: p.metadata.deletionTimestamp === undefined && (p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false),
  }));
}

async function agentPodOn(node: string): Promise<string> {
  const pods = await agentPodsOn(node);
  assert.equal(pods.length, 1, `agent pods on ${node}: ${JSON.stringify(pods)}`);
  return pods[0]!.name;
}

/**
 * Issue 34 item 7 on the iptables route (the quickest to deploy), each event with `kubectl logs -f` running.
 * First the premise the edge events rest on: kube-apiserver ends `logs -f` normally (exit 0, nothing on stderr)
 * when the kubelet's stream breaks, with no tunnel on the way (the cloud node's kubelet restarted). So no tunnel
 * can make kubectl fail there: what users see is how soon the stream ends and how soon a new one works. That our
 * side cuts (resets) what an agent going away still carried is test/e2e/cut-streams.test.ts's.
 */
async function lifeEvents(t: TestContext): Promise<void> {
  const bins = findClusterBinaries();
  if ('missing' in bins) throw new Error(bins.missing);
  const state = (): ClusterState => readState()!;
  const nodeState = (s: ClusterState, name: string): NodeState => s.nodes.find((n) => n.name === name)!;
  const spec = (name: string): NodeSpec => NODES.find((n) => n.name === name)!;

  const kubeletRestart = async (node: string): Promise<{ end: StreamEnd; linesBefore: number; newLogsMs: number | undefined }> => {
    const logs = followLogs(matrixPodName(node));
    try {
      assert.ok(await logs.more(3, 20_000), `logs -f ${matrixPodName(node)}: no lines`);
      const linesBefore = logs.numbers.length;
      const s = state();
      const t0 = Date.now();
      logs.since(t0);
      await restartKubelet(s, nodeState(s, node), spec(node), bins);
      const end = await Promise.race([logs.ended, sleep(60_000).then(() => undefined)]);
      assert.ok(end !== undefined, `logs -f ${matrixPodName(node)} still running 60 s after its kubelet restarted`);
      return { end, linesBefore, newLogsMs: await logsWorkAfter(matrixPodName(node), 60_000, t0) };
    } finally {
      await logs.stop();
    }
  };

  await t.test("premise: the cloud node's kubelet restarted under logs -f (no tunnel): kube-apiserver ends the stream normally", async () => {
    const r = await kubeletRestart(CLOUD.name);
    t.diagnostic(
      `cloud kubelet restart: logs -f ended exit ${r.end.code} after ${secs(r.end.atMs)}, stderr ${JSON.stringify(r.end.stderr)}; new logs after ${secs(r.newLogsMs)}`,
    );
    assert.deepEqual({ code: r.end.code, stderr: r.end.stderr }, { code: 0, stderr: '' });
    assert.ok(r.newLogsMs !== undefined);
  });

  await t.test('an edge agent pod deleted: logs -f ends within the drain (30 s) and a bound; kubectl logs works before and after the replacement', async () => {
    const node = ROUTERS[0]!.edge.name;
    const pod = matrixPodName(node);
    const agent = await agentPodOn(node);
    const logs = followLogs(pod);
    try {
      assert.ok(await logs.more(3, 20_000), `logs -f ${pod}: no lines`);
      const t0 = Date.now();
      logs.since(t0);
      await mustKubectl(['-n', 'kube-system', 'delete', agent, '--wait=false']);
      let replacedMs: number | undefined;
      const replaced = async (): Promise<boolean> => {
        replacedMs ??= (await agentPodsOn(node)).some((p) => p.name !== agent && p.ready) ? Date.now() - t0 : undefined;
        return replacedMs !== undefined;
      };
      const samples = await logsTimeline(pod, replaced, 120_000, t0);
      const end = await Promise.race([logs.ended, sleep(0).then(() => undefined)]);
      const gap = longestGap(samples);
      t.diagnostic(
        `agent pod deleted: logs -f went on ${secs(end?.atMs)} and ended ${end === undefined ? '(not)' : `exit ${end.code}, stderr ${JSON.stringify(end.stderr)}`}; ` +
          `the replacement Ready ${secs(replacedMs)} after the delete; kubectl logs first worked ${secs(samples.find((s) => s.ok)?.atMs)} after it, ` +
          `${gap === undefined ? 'with no failure' : `failed from ${secs(gap.fromMs)} to ${secs(gap.toMs)}`} (${samples.length} tries)`,
      );
      assert.ok(end !== undefined && end.atMs < 45_000, "logs -f did not end within 45 s of the agent pod's delete");
      assert.ok(replacedMs !== undefined, 'no replacement agent Ready within 120 s');
      assert.equal(samples.at(-1)?.ok, true, 'kubectl logs does not work through the new agent');
      assert.ok(gap === undefined || gap.toMs - gap.fromMs < 30_000, `kubectl logs failed for ${secs(gap && gap.toMs - gap.fromMs)}`);
      const again = followLogs(pod);
      try {
        assert.ok(await again.more(3, 10_000), 'a new logs -f shows no lines');
      } finally {
        await again.stop();
      }
    } finally {
      await logs.stop();
    }
  });

  await t.test("a 3 s outage of an edge node's NAT router: logs -f goes on, every line exactly once", async () => {
    const router = ROUTERS[1]!;
    const pod = matrixPodName(router.edge.name);
    const logs = followLogs(pod);
    try {
      assert.ok(await logs.more(3, 20_000), `logs -f ${pod}: no lines`);
      await inNetns(router.netns, 'iptables', ['-I', 'FORWARD', '1', '-j', 'DROP']);
      try {
        await sleep(3000);
      } finally {
        await inNetns(router.netns, 'iptables', ['-D', 'FORWARD', '-j', 'DROP']);
      }
      const t0 = Date.now();
      const seen = logs.numbers.length;
      assert.ok(await logs.more(1, 30_000), 'no line after the outage');
      const firstAfterMs = Date.now() - t0;
      assert.ok(await logs.more(10, 10_000), 'fewer than 10 lines in 10 s after the outage');
      const { missing, repeated } = gapsAndRepeats(logs.numbers);
      t.diagnostic(
        `NAT outage 3 s: ${logs.numbers.length} lines, ${seen} by the outage's end, the next ${secs(firstAfterMs)} after it; missing ${missing.length}, repeated ${repeated.length}`,
      );
      assert.deepEqual({ missing, repeated }, { missing: [], repeated: [] });
    } finally {
      await logs.stop();
    }
    assert.equal(await Promise.race([logs.ended, sleep(0).then(() => 'running')]), 'running');
  });

  await t.test("an edge node's kubelet restarted: logs -f ends normally, a new logs works once the kubelet is back", async () => {
    const r = await kubeletRestart(ROUTERS[1]!.edge.name);
    t.diagnostic(
      `edge kubelet restart: logs -f ended exit ${r.end.code} after ${secs(r.end.atMs)}, stderr ${JSON.stringify(r.end.stderr)}; new logs after ${secs(r.newLogsMs)}`,
    );
    assert.equal(r.end.code, 0, r.end.stderr);
    assert.ok(r.newLogsMs !== undefined && r.newLogsMs < 30_000, `no kubectl logs within 30 s of the kubelet restart (${secs(r.newLogsMs)})`);
  });
}

/**
 * `kubectl rollout restart` of the server with two replicas, with `logs -f` running. The server runs on the host
 * network, so two replicas need two nodes it may run on: the second cloud node is added for this. On the DNS
 * route, where kube-apiserver reaches a replica through the internal Service's ClusterIP (kube-proxy picks a
 * ready one); agents keep a link to each replica.
 */
async function rolloutRestart(t: TestContext): Promise<void> {
  await t.test(
    'rollout restart of the server with two replicas (dns route, a second cloud node): kubectl logs works throughout or after a short gap',
    async () => {
      const bins = findClusterBinaries();
      if ('missing' in bins) throw new Error(bins.missing);
      const t0 = Date.now();
      await addSecondCloudNode(readState()!, bins);
      await deploy(readState()!, 'dns', bins, { ha: true, progress: (line) => t.diagnostic(line) });
      const status = await kubectl(['-n', 'kube-system', 'rollout', 'status', 'deployment/yurt-tunnel-server', '--timeout=180s'], { timeoutMs: 190_000 });
      assert.equal(
        status.code,
        0,
        `two server replicas not rolled out: ${status.stdout}${status.stderr}\n${await mustKubectl(['-n', 'kube-system', 'get', 'pods', '-o', 'wide'])}`,
      );
      const placed = await mustKubectl(['-n', 'kube-system', 'get', 'pods', '-l', 'k8s-app=yurt-tunnel-server', '-o', 'jsonpath={.items[*].spec.nodeName}']);
      assert.deepEqual(placed.split(' ').sort(), [CLOUD.name, CLOUD_2.name]);
      t.diagnostic(`second cloud node and two server replicas in ${secs(Date.now() - t0)}`);

      const pod = matrixPodName(ROUTERS[0]!.edge.name);
      assert.ok((await logsWorkAfter(pod, 60_000)) !== undefined, 'kubectl logs does not work with two replicas');
      const logs = followLogs(pod);
      try {
        assert.ok(await logs.more(3, 20_000), `logs -f ${pod}: no lines`);
        const t1 = Date.now();
        logs.since(t1);
        await mustKubectl(['-n', 'kube-system', 'rollout', 'restart', 'deployment/yurt-tunnel-server']);
        let rolledMs: number | undefined;
        const rolledOut = async (): Promise<boolean> => {
          const r = await kubectl(['-n', 'kube-system', 'rollout', 'status', 'deployment/yurt-tunnel-server', '--watch=false']);
          if (r.code === 0 && /successfully rolled out/.test(r.stdout)) rolledMs ??= Date.now() - t1;
          return rolledMs !== undefined;
        };
        const samples = await logsTimeline(pod, rolledOut, 240_000, t1);
        const end = await Promise.race([logs.ended, sleep(0).then(() => undefined)]);
        const gap = longestGap(samples);
        t.diagnostic(
          `rollout restart: done ${secs(rolledMs)} after it; logs -f ${end === undefined ? 'still running' : `ended after ${secs(end.atMs)}, exit ${end.code}, stderr ${JSON.stringify(end.stderr)}`}; ` +
            `kubectl logs ${gap === undefined ? 'worked throughout' : `failed from ${secs(gap.fromMs)} to ${secs(gap.toMs)}`} (${samples.length} tries, ${samples.filter((x) => !x.ok).length} failed)`,
        );
        assert.ok(rolledMs !== undefined, 'the rollout did not finish within 240 s');
        assert.equal(samples.at(-1)?.ok, true, 'kubectl logs does not work after the rollout');
        assert.ok(gap === undefined || gap.toMs - gap.fromMs < 30_000, `kubectl logs failed for ${secs(gap && gap.toMs - gap.fromMs)}`);
      } finally {
        await logs.stop();
      }
    },
  );
}

const byName = <T extends { name: string }>(a: T, b: T): number => a.name.localeCompare(b.name);

test(
  'a real cluster: three kubelets, pods on each, edges behind NAT, our image runs, down leaves nothing',
  { skip, timeout: 900_000 },
  async (t: TestContext) => {
    // Never take down a cluster someone brought up by hand.
    assert.equal(readState(), undefined, `a cluster is already up (${STATE_DIR}): \`npm run cluster -- down\` first`);
    const pidsBefore = new Set(readdirSync('/proc').filter((p) => /^\d+$/.test(p)));
    const listingBefore = rootListing();
    const started = Date.now();
    let tornDown = false;
    t.after(async () => {
      if (!tornDown) await down();
    });
    await up({ progress: (line) => t.diagnostic(line) });
    t.diagnostic(`up in ${((Date.now() - started) / 1000).toFixed(1)} s`);

    await t.test('three nodes Ready, labelled edge or not, with their own InternalIPs', async () => {
      assert.deepEqual(
        (await listNodes()).sort(byName),
        NODES.map((s) => ({ name: s.name, ready: true, edge: s.role === 'edge' ? 'true' : 'false', internalIP: s.address })).sort(byName),
      );
    });

    await t.test('a busybox pod Running on every node; our image runs yurt-tunnel-agent --help', async () => {
      for (const node of NODES) await mustKubectl(['apply', '-f', '-'], JSON.stringify(hostPathPod(node.name)));
      for (const node of NODES) await mustKubectl(['apply', '-f', '-'], JSON.stringify(matrixPod(node.name)));
      await mustKubectl(['apply', '-f', '-'], JSON.stringify(pod('ours', CLOUD.name, LOCAL_IMAGE, ['yurt-tunnel-agent', '--help'], 'Never')));
      for (const name of NODES.flatMap((n) => [`bb-${n.name}`, matrixPodName(n.name)])) {
        await waitFor(
          `pod ${name} Running`,
          90_000,
          async () => ((await podStatus(name)).phase === 'Running' ? true : undefined),
          async () => mustKubectl(['describe', 'pod', name]),
        );
      }
      const done = await waitFor('our image pod finished', 90_000, async () => {
        const s = await podStatus('ours');
        return s.phase === 'Succeeded' || s.phase === 'Failed' ? s : undefined;
      });
      assert.equal(done.phase, 'Succeeded', JSON.stringify(done));
      assert.equal(done.containerStatuses?.[0]?.state?.terminated?.exitCode, 0);
      assert.match(await mustKubectl(['logs', 'ours']), /--tunnelserver-addr/);
    });

    await t.test("a pod's hostPaths are its node's own: its kubelet.conf, and a folder of /var/lib made on that node only", async () => {
      for (const node of NODES) {
        const out = privatePath(node.name, HOSTPATH_DIR);
        await waitFor(`${out}/node`, 30_000, async () => (existsSync(join(out, 'node')) ? true : undefined));
        assert.equal(readFileSync(join(out, 'node'), 'utf8'), `${node.name}\n`);
        const conf = readFileSync(join(out, 'kubelet.conf'), 'utf8');
        assert.equal(conf, readFileSync(privatePath(node.name, '/etc/kubernetes/kubelet.conf'), 'utf8'));
        // As on a kubeadm node: the CA inline, the client certificate by path (where the agent's manifest mounts it from).
        assert.match(conf, /certificate-authority-data: /);
        assert.match(conf, /client-certificate: \/var\/lib\/kubelet\/pki\/kubelet-client-current\.pem/);
      }
      assert.equal(existsSync(HOSTPATH_DIR), false, `${HOSTPATH_DIR} was made in the root file system`);
    });

    await t.test('kubectl logs reaches the cloud pod; an edge pod is unreachable (no tunnel yet)', async () => {
      assert.match(await mustKubectl(['logs', `bb-${CLOUD.name}`]), new RegExp(`hello from ${CLOUD.name}`));
      for (const r of ROUTERS) {
        const res = await kubectl(['logs', `bb-${r.edge.name}`]);
        assert.notEqual(res.code, 0);
        assert.match(res.stderr, new RegExp(`dial tcp ${escape(r.edge.address)}:10250: connect: no route to host`));
      }
    });

    await t.test('no direct connection from the cloud namespace to an edge kubelet; edges reach the cloud through their NAT router', async () => {
      for (const r of ROUTERS) {
        assert.deepEqual(await probeFrom(CLOUD.netns, r.edge.address, 10250), { ok: false, code: 'EHOSTUNREACH' });
      }
      // The edge nodes' kubelets and kube-proxies talk to kube-apiserver through their router: it masquerades them.
      for (const r of ROUTERS) {
        const conntrack = await run('nsenter', [`--net=/run/netns/${r.netns}`, '--', 'conntrack', '-L', '-p', 'tcp', '--dport', '6443']);
        assert.match(
          conntrack,
          new RegExp(`src=${escape(r.edge.address)} dst=${escape(CLOUD.address)} .*src=${escape(CLOUD.address)} dst=${escape(r.uplink.router)} `),
        );
      }
    });

    // Each route deployed by `npm run cluster -- deploy`'s code, on this same cluster, one after the other.
    const bins = findClusterBinaries();
    const figures = { applyToLogs: [] as string[], resources: [] as ({ route: string } & ResourceFigure)[] };
    for (const route of ROUTES) {
      await t.test(
        `${route} route from the manifests: logs, logs -f, exec, exec -i, attach, port-forward, cp both ways, node proxy on edge and cloud pods`,
        async () => {
          if ('missing' in bins) throw new Error(bins.missing);
          const t0 = Date.now();
          // Apply → the first kubectl logs through the tunnel (edge-1's pod), polled from the apply on.
          let firstLogs: Promise<number | undefined> | undefined;
          await deploy(readState()!, route, bins, {
            progress: (line) => t.diagnostic(line),
            applying: () => {
              firstLogs = logsWorkAfter(matrixPodName(ROUTERS[0]!.edge.name), 240_000);
            },
          });
          for (const r of ROUTERS) {
            await waitFor(`kubectl logs ${matrixPodName(r.edge.name)} through the tunnel`, 60_000, async () =>
              (await kubectl(['logs', '--tail=1', matrixPodName(r.edge.name)])).code === 0 ? true : undefined,
            );
          }
          const applyToLogsMs = await firstLogs;
          figures.applyToLogs.push(`${route}: ${secs(applyToLogsMs)}`);
          t.diagnostic(`${route}: deploy started → kubectl logs on every edge pod in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
          if (route === 'dns') {
            // kube-apiserver found the kubelets by name through dnsmasq, which serves the DNS controller's records:
            // edge nodes at the internal Service's ClusterIP (kube-proxy's DNAT to the server), the cloud node at its own.
            const tunnelIP = await mustKubectl(['-n', 'kube-system', 'get', 'svc', 'x-tunnel-server-internal-svc', '-o', 'jsonpath={.spec.clusterIP}']);
            const want = NODES.map((n) => `${n.role === 'edge' ? tunnelIP : n.address}\t${n.name}`).sort();
            assert.deepEqual(readFileSync(DNS_HOSTS_FILE, 'utf8').trim().split('\n').sort(), want);
            assert.match(
              await mustKubectl(['-n', 'kube-system', 'get', 'cm', 'yurt-tunnel-nodes', '-o', 'jsonpath={.data.tunnel-nodes}']),
              new RegExp(escape(want[0]!)),
            );
          }
          // The server writes its certificates as its route's user (root on iptables): all of them its own, what an
          // earlier route's server left too, or it cannot keep what it was issued.
          const pki = privatePath(CLOUD.name, '/var/lib/yurttunnel-server/pki');
          const uid = route === 'iptables' ? 0 : 1000;
          assert.ok(existsSync(join(pki, 'yurttunnel-server-current.pem')), `no stored serving certificate in ${pki}`);
          assert.deepEqual(
            readdirSync(pki).filter((f) => lstatSync(join(pki, f)).uid !== uid),
            [],
            `files in ${pki} not owned by uid ${uid}`,
          );
          const t1 = Date.now();
          const before = await sampleResources(readState()!);
          const results = await Promise.all(NODES.map((n) => runMatrix(n.name)));
          const after = await sampleResourcesAfter(readState()!, before);
          for (const f of resourceFigures(before, after)) figures.resources.push({ route, ...f });
          t.diagnostic(`${route}: the kubectl matrix on ${NODES.length} pods in ${((Date.now() - t1) / 1000).toFixed(1)} s`);
          assert.deepEqual(
            results.map(foldMatrix),
            NODES.map((n) => expectedMatrix(n.name)),
            results.flatMap((r, i) => r.errors.map((e) => `${NODES[i]!.name} ${e}`)).join('\n'),
          );
        },
      );
      if (route === 'iptables') await lifeEvents(t);
      if (route === 'dns') await rolloutRestart(t);
      if (route === 'egress-selector') {
        // Every path of kube-apiserver's to a kubelet goes through the server's socket on this route: the cloud pod's too.
        await t.test('egress-selector route without the server: every command fails, on edge and cloud pods', async () => {
          await mustKubectl(['-n', 'kube-system', 'scale', 'deployment/yurt-tunnel-server', '--replicas=0']);
          // Gone is gone: no need to sit out the server's 30 s grace period (its drain) for this.
          await mustKubectl(['-n', 'kube-system', 'delete', 'pods', '-l', 'k8s-app=yurt-tunnel-server', '--grace-period=1', '--wait=false']);
          await waitFor('no server pod', 60_000, async () => {
            const r = await kubectl(['-n', 'kube-system', 'get', 'pods', '-l', 'k8s-app=yurt-tunnel-server', '-o', 'name']);
            return r.code === 0 && r.stdout.trim() === '' ? true : undefined;
          });
          const t0 = Date.now();
          const results = await Promise.all(NODES.map((n) => runMatrix(n.name)));
          t.diagnostic(`the matrix without the server in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
          NODES.forEach((n, i) => {
            const got = foldMatrix(results[i]!) as Record<string, unknown>;
            for (const [key, want] of Object.entries(expectedMatrix(n.name))) assert.notDeepEqual(got[key], want, `${n.name} ${key} passed without the server`);
          });
        });
      }
    }

    // Issue 34 item 8, for the report: one table (CPU averaged over the kubectl matrix on the three pods).
    console.log(`kubectl apply → first kubectl logs through the tunnel: ${figures.applyToLogs.join(', ')}`);
    console.table(
      figures.resources.map((f) => ({
        route: f.route,
        node: f.node,
        what: f.what,
        memory: f.memory,
        'CPU (millicores)': f.cpuMillicores,
        'over (s)': f.overSeconds,
      })),
    );

    await t.test('down removes everything and says so; a second down is a no-op', async () => {
      const t0 = Date.now();
      const result = await down((line) => t.diagnostic(line));
      tornDown = true;
      t.diagnostic(`down in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      assert.deepEqual(result, { wasUp: true, left: [] });
      assert.deepEqual(leftOnMachine(pidsBefore), []);
      // xtables.lock: iptables makes it on first use, whoever runs it (other tests too).
      assert.deepEqual(
        rootListing().filter((p) => !listingBefore.includes(p) && p !== '/run/xtables.lock'),
        [],
      );
      assert.deepEqual(await down(), { wasUp: false, left: [] });
    });
  },
);
