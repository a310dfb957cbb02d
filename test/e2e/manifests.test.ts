// The manifests (manifests/), as docs/deploying.md's "Steps" use them,
// against a real kube-apiserver: kustomize builds the base and every overlay;
// everything applies with --dry-run=server and then for real; the rendered
// objects have what they promise (host network, probes on the meta ports,
// resources, NET_ADMIN only for iptables, the CoreDNS hosts setup, the
// EgressSelectorConfiguration matching the server's socket); every flag they
// pass exists; the deploying steps' kustomization (hack/deploy-kustomization.ts) puts
// the image in place on every route, by tag or digest; the HA component on
// one node keeps one server; the server runs with the Deployment's arguments
// as its ServiceAccount (a TokenRequest token) and is refused nothing; the
// agent runs with its node's kubelet credentials, as the DaemonSet mounts
// them, finds the server from the manifests' NodePort Service, and both
// agent's and server's CSRs are approved by the server's approver with no one
// approving by hand.

import assert from 'node:assert/strict';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { APPROVED_REASON } from '../../pkg/kube/csr-approver.js';
import { IMAGE_PLACEHOLDER, ROUTES, writeDeployKustomization } from '../../hack/deploy-kustomization.js';
import { LOCAL_IMAGE } from '../../hack/image.js';
import { kubeletKubeconfig } from '../support/cluster.js';
import { controlPlaneSkipReason, listCSRs, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness, suiteHarness } from '../support/harness.js';
import { AGENT_BIN, runProcess, SERVER_BIN, startProcess } from '../support/processes.js';
import { tempDir } from '../support/tunnel.js';
import { startTcpForward } from '../support/tcp-forward.js';
import { repoRoot } from '../support/upstream.js';
import { localServerFlags } from '../../hack/local-tunnel.js';

const skip = controlPlaneSkipReason();

const MANIFESTS = join(repoRoot(), 'manifests');
const OVERLAYS = ROUTES;

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
}
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string } };
}
interface Probe {
  httpGet?: { host?: string; path: string; port: number };
}
interface Container {
  name: string;
  image: string;
  imagePullPolicy?: string;
  ports?: { containerPort: number; hostPort?: number }[];
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  startupProbe?: Probe;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: { runAsUser?: number; allowPrivilegeEscalation?: boolean; capabilities?: { add?: string[]; drop?: string[] } };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}
interface PodSpec {
  hostNetwork?: boolean;
  serviceAccountName?: string;
  automountServiceAccountToken?: boolean;
  securityContext?: { runAsUser?: number };
  containers: Container[];
  initContainers?: Container[];
  volumes?: { name: string; hostPath?: { path: string; type?: string }; configMap?: { name: string } }[];
  affinity?: { podAntiAffinity?: unknown };
  topologySpreadConstraints?: { topologyKey: string; whenUnsatisfiable: string; maxSkew: number }[];
}
type Workload = Obj & { spec: { replicas?: number; template: { spec: PodSpec } } };

function find<T extends Obj = Obj>(objs: Obj[], kind: string, name: string): T {
  const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
  assert.ok(o !== undefined, `${kind} ${name} is in the build`);
  return o as T;
}

/** `$(VAR)` references expanded from the container's env, as the kubelet does. */
function expand(args: string[], env: Record<string, string>): string[] {
  return args.map((a) => a.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name: string) => env[name] ?? m));
}

function envOf(c: Container): Record<string, string> {
  return Object.fromEntries((c.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));
}

function flagNames(args: string[]): string[] {
  return args.filter((a) => a.startsWith('--')).map((a) => a.split('=')[0]!);
}

describe('manifests with a real kube-apiserver', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  /** The server-side dry run's answer per build: the objects as the API server would store them. */
  const builds = new Map<string, Obj[]>();

  async function kubectl(args: string[], input?: string): Promise<string> {
    const r = await cp.kubectl(args, input === undefined ? {} : { input });
    assert.equal(r.code, 0, `kubectl ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  }

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    suite.defer(() => cp.stop());
  });
  after(() => suite.close());

  test('kustomize builds the base and every overlay; each applies with --dry-run=server, then for real', async () => {
    for (const dir of ['.', ...OVERLAYS.map((o) => `overlays/${o}`)]) {
      const yaml = await kubectl(['kustomize', join(MANIFESTS, dir)]);
      assert.match(yaml, /kind: Deployment/);
      const dry = JSON.parse(await kubectl(['apply', '--dry-run=server', '-o', 'json', '-f', '-'], yaml)) as { items?: Obj[] } & Obj;
      builds.set(dir, dry.items ?? [dry]);
      await kubectl(['apply', '-f', '-'], yaml);
    }
    // The last one applied is the DNS route's (overlays/egress-selector adds no objects of its own; the DNS Role stays).
    await kubectl(['apply', '-k', join(MANIFESTS, 'overlays/dns')]);
  });

  test('the objects: host network, probes on the meta ports, resources, cert dir on a hostPath, downward API, Services as §8', () => {
    for (const [dir, objs] of builds) {
      const server = find<Workload>(objs, 'Deployment', 'yurt-tunnel-server').spec.template.spec;
      const agent = find<Workload>(objs, 'DaemonSet', 'yurt-tunnel-agent').spec.template.spec;
      for (const [pod, metaPort, certDir] of [
        [server, 10265, '/var/lib/yurttunnel-server'],
        [agent, 10266, '/var/lib/yurttunnel-agent'],
      ] as const) {
        assert.equal(pod.hostNetwork, true, dir);
        const c = pod.containers[0]!;
        assert.deepEqual(c.livenessProbe?.httpGet, { host: '127.0.0.1', path: '/healthz', port: metaPort, scheme: 'HTTP' }, dir);
        assert.deepEqual(c.readinessProbe?.httpGet, { host: '127.0.0.1', path: '/readyz', port: metaPort, scheme: 'HTTP' }, dir);
        for (const k of ['cpu', 'memory'])
          assert.ok(c.resources?.requests?.[k] !== undefined && c.resources.limits?.[k] !== undefined, `${dir}: ${c.name} ${k} request and limit`);
        assert.ok(
          pod.volumes?.some((v) => v.name === 'cert-dir' && v.hostPath?.path === certDir),
          `${dir}: ${c.name}'s cert dir on a hostPath`,
        );
        assert.ok(c.args?.includes(`--cert-dir=${certDir}/pki`), dir);
      }
      const env = agent.containers[0]!.env ?? [];
      assert.equal(env.find((e) => e.name === 'NODE_NAME')?.valueFrom?.fieldRef?.fieldPath, 'spec.nodeName');
      assert.equal(env.find((e) => e.name === 'NODE_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.hostIP');
      assert.ok(agent.containers[0]!.args?.includes('--node-name=$(NODE_NAME)') && agent.containers[0]!.args.includes('--node-ip=$(NODE_IP)'));

      // The agent: its node's kubelet credentials on read-only hostPaths, no ServiceAccount token, uid 0 with no capability.
      const agentContainer = agent.containers[0]!;
      assert.ok(agentContainer.args?.includes('--kube-config=/etc/kubernetes/kubelet.conf'), dir);
      assert.ok(!flagNames(agentContainer.args ?? []).includes('--apiserver-addr'), dir);
      assert.equal(agent.automountServiceAccountToken, false, dir);
      assert.equal(agent.serviceAccountName ?? 'default', 'default', dir);
      for (const [path, type] of [
        ['/etc/kubernetes/kubelet.conf', 'File'],
        ['/var/lib/kubelet/pki', 'DirectoryOrCreate'],
      ] as const) {
        const volume = agent.volumes?.find((v) => v.hostPath?.path === path);
        assert.ok(volume !== undefined, `${dir}: ${path} is a hostPath volume`);
        assert.equal(volume.hostPath?.type, type, `${dir}: ${path}`);
        assert.ok(
          agentContainer.volumeMounts?.some((m) => m.name === volume.name && m.mountPath === path && m.readOnly === true),
          `${dir}: ${path} mounted read-only where kubelet.conf names it`,
        );
      }
      assert.equal(agent.securityContext?.runAsUser, 0, dir);
      assert.deepEqual(agentContainer.securityContext?.capabilities, { drop: ['ALL'] }, dir);
      assert.equal(agentContainer.securityContext.allowPrivilegeEscalation, false, dir);
      assert.equal(agent.initContainers, undefined, `${dir}: nothing of the agent's runs with a capability`);
      for (const kind of ['ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']) {
        assert.ok(!objs.some((o) => o.kind === kind && o.metadata.name === 'yurt-tunnel-agent'), `${dir}: no ${kind} for the agent`);
      }

      // Production defaults: quiet logs, the CSR approver on, the image pulled once.
      const serverContainer = server.containers[0]!;
      for (const c of [serverContainer, agentContainer])
        assert.ok(!c.args!.some((a) => /^--?v(=|$)/.test(a) && a !== '--v=0'), `${dir}: ${c.name} logs at --v=0`);
      assert.ok(serverContainer.args!.includes('--enable-csr-approver=true'), dir);
      for (const c of [...server.containers, ...(server.initContainers ?? []), ...agent.containers]) {
        assert.equal(c.image, IMAGE_PLACEHOLDER, `${dir}: ${c.name}`);
        assert.equal(c.imagePullPolicy, 'IfNotPresent', `${dir}: ${c.name}`);
      }

      const svc = find<Obj & { spec: { type: string; ports: { name: string; port: number; targetPort: number }[] } }>(objs, 'Service', 'x-tunnel-server-svc');
      const internal = find<Obj & { spec: { ports: { name: string; port: number; targetPort: number }[] } }>(objs, 'Service', 'x-tunnel-server-internal-svc');
      for (const s of [svc, internal]) assert.equal(s.metadata.labels?.name, 'yurt-tunnel-server');
      assert.deepEqual(
        svc.spec.ports.map((p) => [p.name, p.port, p.targetPort]),
        [['tcp', 10262, 10262]],
      );
      assert.deepEqual(
        internal.spec.ports.map((p) => [p.name, p.port, p.targetPort]),
        [
          ['https', 10250, 10263],
          ['http', 10255, 10264],
        ],
      );
      const proxyClient = find<Obj & { subjects: { kind: string; name: string }[] }>(objs, 'ClusterRoleBinding', 'tunnel-proxy-client');
      assert.deepEqual(
        proxyClient.subjects.map((s) => [s.kind, s.name]),
        [['User', 'tunnel-proxy-client']],
      );
      find(objs, 'ConfigMap', 'yurt-tunnel-server-cfg');

      // NET_ADMIN in the iptables overlay only, and only for the server.
      const netAdmin = objs.flatMap((o) => {
        // Any object of the build: only workloads have a pod template.
        const pod = (o as { spec?: { template?: { spec?: PodSpec } } }).spec?.template?.spec;
        return [...(pod?.containers ?? []), ...(pod?.initContainers ?? [])]
          .filter((c) => c.securityContext?.capabilities?.add?.includes('NET_ADMIN'))
          .map((c) => c.name);
      });
      assert.deepEqual(netAdmin, dir === 'overlays/iptables' ? ['yurt-tunnel-server'] : [], dir);
      const serverEnv = envOf(server.containers[0]!);
      assert.equal(serverEnv.ENABLE_IPTABLES, String(dir === 'overlays/iptables'), dir);
      assert.equal(serverEnv.ENABLE_DNS_CONTROLLER, String(dir === 'overlays/dns'), dir);
    }
  });

  test('the DNS overlay: CoreDNS serves the ConfigMap yurt-tunnel-nodes with its hosts plugin', () => {
    const objs = builds.get('overlays/dns')!;
    const corefile = find<Obj & { data: { Corefile: string } }>(objs, 'ConfigMap', 'yurt-tunnel-dns').data.Corefile;
    assert.match(corefile, /hosts \/etc\/edge\/tunnel-nodes \{[^}]*reload[^}]*fallthrough/);
    const dns = find<Workload>(objs, 'Deployment', 'yurt-tunnel-dns').spec.template.spec;
    const volume = dns.volumes?.find((v) => v.configMap?.name === 'yurt-tunnel-nodes');
    assert.ok(volume !== undefined);
    assert.ok(dns.containers[0]!.volumeMounts?.some((m) => m.name === volume.name && m.mountPath === '/etc/edge'));
    find(objs, 'Service', 'yurt-tunnel-dns');
    find(objs, 'Role', 'yurt-tunnel-server-dns');
  });

  test('the egress-selector overlay: the server serves the socket its EgressSelectorConfigurations name, in each mode', async () => {
    const args = find<Workload>(builds.get('overlays/egress-selector')!, 'Deployment', 'yurt-tunnel-server').spec.template.spec.containers[0]!.args!;
    const uds = args.find((a) => a.startsWith('--egress-selector-uds='))!.split('=')[1]!;
    assert.ok(args.includes('--egress-selector-enable=true') && args.includes('--egress-selector-mode=grpc'));
    for (const [file, protocol] of [
      ['egress-selector-grpc.yaml', 'GRPC'],
      ['egress-selector-http-connect.yaml', 'HTTPConnect'],
    ]) {
      const text = await readFile(join(MANIFESTS, 'overlays/egress-selector/kube-apiserver', file!), 'utf8');
      assert.match(text, /^apiVersion: apiserver\.k8s\.io\/v1beta1\nkind: EgressSelectorConfiguration$/m);
      assert.match(
        text,
        new RegExp(`- name: cluster\\n  connection:\\n    proxyProtocol: ${protocol}\\n    transport:\\n      uds:\\n        udsName: ${uds}\\n`),
      );
    }
    const server = find<Workload>(builds.get('overlays/egress-selector')!, 'Deployment', 'yurt-tunnel-server').spec.template.spec;
    const socketDir = uds.slice(0, uds.lastIndexOf('/'));
    assert.ok(
      server.volumes?.some((v) => v.hostPath?.path === socketDir),
      "the socket's folder is shared with the host (kube-apiserver)",
    );
  });

  test('a kustomization per route puts the image in place (tag or digest); with HA, two replicas that host ports keep on separate nodes', async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const digest = `registry.example.com:5000/yurt-tunnel@sha256:${'ab'.repeat(32)}`;
    for (const route of ROUTES) {
      for (const [ha, image] of [
        [false, LOCAL_IMAGE],
        [true, digest],
      ] as const) {
        const mine = await writeDeployKustomization({ manifests: MANIFESTS, dir: join(dir, `${route}-${ha}`), route, ha, image });
        const objs = (JSON.parse(await kubectl(['apply', '--dry-run=server', '-o', 'json', '-k', mine])) as { items: Obj[] }).items;
        const workloads = objs.filter((o) => o.kind === 'Deployment' || o.kind === 'DaemonSet') as Workload[];
        const ours = workloads
          .flatMap((w) => [...w.spec.template.spec.containers, ...(w.spec.template.spec.initContainers ?? [])])
          .filter((c) => !c.image.startsWith('registry.k8s.io/coredns/'));
        assert.ok(ours.length >= 3, route);
        for (const c of ours) assert.equal(c.image, image, `${route}: ${c.name}`);
        const server = find<Workload>(objs, 'Deployment', 'yurt-tunnel-server').spec;
        assert.equal(server.replicas, ha ? 2 : 1, route);
        assert.equal(envOf(server.template.spec.containers[0]!).SERVER_COUNT, ha ? '2' : '1', route);
        // With HA, servers publish their Leases and agents count them, as the nodes they read the API as may.
        assert.equal(envOf(server.template.spec.containers[0]!).ENABLE_LEASE_CONTROLLER, String(ha), route);
        const agent = find<Workload>(objs, 'DaemonSet', 'yurt-tunnel-agent').spec;
        assert.equal(envOf(agent.template.spec.containers[0]!).COUNT_SERVER_LEASES, String(ha), route);
        assert.equal(
          objs.some((o) => o.kind === 'RoleBinding' && o.metadata.name === 'yurt-tunnel-agent-server-leases'),
          ha,
          route,
        );
        if (!ha) continue;
        // One control-plane node must still come up with one server: nothing required but the host ports.
        const pod = server.template.spec;
        assert.equal(pod.affinity?.podAntiAffinity, undefined, route);
        assert.deepEqual(
          pod.topologySpreadConstraints?.map((c) => [c.topologyKey, c.whenUnsatisfiable, c.maxSkew]),
          [['kubernetes.io/hostname', 'ScheduleAnyway', 1]],
          route,
        );
        assert.equal(pod.hostNetwork, true, route);
        // The API server makes every container port of a host-network pod a host port: two replicas never share a node.
        assert.deepEqual(
          pod.containers[0]!.ports?.map((p) => [p.containerPort, p.hostPort]),
          [
            [10262, 10262],
            [10263, 10263],
          ],
          route,
        );
        find(objs, 'PodDisruptionBudget', 'yurt-tunnel-server');
      }
    }
  });

  test("every flag the manifests pass exists in the server's and the agent's --help", async (t) => {
    const h = harness(t);
    const help = {
      'yurt-tunnel-server': (await runProcess(h, SERVER_BIN, ['--help'])).output,
      'yurt-tunnel-agent': (await runProcess(h, AGENT_BIN, ['--help'])).output,
    };
    for (const [dir, objs] of builds) {
      for (const o of objs.filter((x) => x.kind === 'Deployment' || x.kind === 'DaemonSet')) {
        for (const c of (o as Workload).spec.template.spec.containers) {
          const command = c.command?.[0] as keyof typeof help | undefined;
          if (command === undefined || !(command in help)) continue;
          for (const flag of flagNames(c.args ?? [])) assert.match(help[command], new RegExp(`(^|[\\s,])${flag}[ ,\\n]`), `${dir}: ${command} ${flag}`);
        }
      }
    }
  });

  test('Deploying, as docs/deploying.md says: your kustomization, the server as its ServiceAccount, the agent as its node, nothing approved by hand', async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h);
    // The kustomization of docs/deploying.md, beside the repository.
    const mine = await writeDeployKustomization({
      manifests: MANIFESTS,
      dir: join(dir, 'my-tunnel'),
      route: 'dns',
      ha: true,
      image: 'registry.example.com/yurt-tunnel:0.1.0',
    });
    const yaml = await kubectl(['kustomize', mine]);
    assert.doesNotMatch(yaml, /image: yurt-tunnel$/m, 'every placeholder image replaced');
    await kubectl(['apply', '--dry-run=server', '-k', mine]);
    await kubectl(['apply', '-k', mine]);
    const deployment = JSON.parse(await kubectl(['get', 'deployment', '-n', 'kube-system', 'yurt-tunnel-server', '-o', 'json'])) as Workload;
    assert.equal(deployment.spec.replicas, 2);
    assert.equal(envOf(deployment.spec.template.spec.containers[0]!).SERVER_COUNT, '2');
    assert.ok(deployment.spec.template.spec.topologySpreadConstraints !== undefined);
    await kubectl(['get', 'pdb', '-n', 'kube-system', 'yurt-tunnel-server']);
    // The nodes: one cloud node, one edge node (docs/deploying.md's labels).
    await putNode(cp, 'cloud-m', { internalIP: '127.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'false' } });
    await putNode(cp, 'edge-m', { internalIP: '127.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });

    // The server with its Deployment's arguments, as its ServiceAccount; the test moves only its ports and files.
    const token = async (sa: string): Promise<string> => {
      const file = join(dir, `${sa}.kubeconfig`);
      const value = (await kubectl(['create', 'token', sa, '-n', 'kube-system', '--duration=1h'])).trim();
      await writeFile(
        file,
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Config',
          clusters: [{ name: 'c', cluster: { server: cp.url, 'certificate-authority-data': Buffer.from(cp.pki.ca.cert).toString('base64') } }],
          users: [{ name: sa, user: { token: value } }],
          contexts: [{ name: 'c', context: { cluster: 'c', user: sa } }],
          'current-context': 'c',
        }),
      );
      return file;
    };
    const serverContainer = deployment.spec.template.spec.containers[0]!;
    const serverArgs = expand(serverContainer.args!, { ...envOf(serverContainer), SERVER_COUNT: '1' });
    const server = startProcess(h, SERVER_BIN, [
      ...serverArgs,
      '--kube-config',
      await token('yurt-tunnel-server'),
      ...localServerFlags({ certDir: join(dir, 'server-pki'), udsPath: join(dir, 'proxier.sock') }),
      // The manifests log at --v=0; the test reads the informers' lines of --v=2.
      '--v=2',
    ]);
    const started = await server.waitForLine(/yurt-tunnel-server started/, 60_000);
    const agentPort = Number(/agentAddress=127\.0\.0\.1:(\d+)/.exec(started)![1]);
    const metaPort = Number(/metaPort=(\d+)/.exec(started)![1]);
    // The probes' paths answer.
    for (const path of ['/healthz', '/readyz']) assert.equal((await fetch(`http://127.0.0.1:${metaPort}${path}`)).status, 200, path);
    // Everything it does with the API: informers, the DNS controller's records, dnat ports and Lease.
    for (const informer of [
      'nodes',
      'pods',
      'kube-system/services',
      'kube-system/configmaps/yurt-tunnel-server-cfg',
      'kube-system/configmaps/yurt-tunnel-nodes',
    ]) {
      await server.waitForLine(new RegExp(`synced .*informer=${informer.replace(/\//g, '\\/')}( |$)`), 30_000);
    }
    await server.waitForLine(/DNS records (ConfigMap created|updated)/, 30_000);
    await kubectl(['patch', 'configmap', '-n', 'kube-system', 'yurt-tunnel-server-cfg', '--type=merge', '-p', '{"data":{"http-proxy-ports":"9100"}}']);
    await server.waitForLine(/dnat ports of the internal Service updated/, 30_000);
    assert.match(await kubectl(['get', 'lease', '-n', 'kube-system', 'tunnel-dns-controller', '-o', 'jsonpath={.spec.holderIdentity}']), /_/);

    // The agent with its DaemonSet's arguments and its node's kubelet credentials where the DaemonSet mounts them (here
    // a kubeconfig of system:node:edge-m elsewhere); it finds the server from the NodePort Service.
    const nodePort = Number(await kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-svc', '-o', 'jsonpath={.spec.ports[0].nodePort}']));
    await startTcpForward(h, agentPort, nodePort);
    const daemonSet = JSON.parse(await kubectl(['get', 'daemonset', '-n', 'kube-system', 'yurt-tunnel-agent', '-o', 'json'])) as Workload;
    const agentContainer = daemonSet.spec.template.spec.containers[0]!;
    const kubeletConf = await kubeletKubeconfig(cp, 'edge-m');
    const agentArgs = expand(agentContainer.args!, { ...envOf(agentContainer), NODE_NAME: 'edge-m', NODE_IP: '127.0.0.1' }).map((a) =>
      a === '--kube-config=/etc/kubernetes/kubelet.conf' ? `--kube-config=${kubeletConf}` : a,
    );
    assert.ok(agentArgs.includes(`--kube-config=${kubeletConf}`), 'the DaemonSet gives the kubelet kubeconfig');
    const agent = startProcess(h, AGENT_BIN, [...agentArgs, '--cert-dir', join(dir, 'agent-pki'), '--meta-port', '0', '--v=2']);
    await agent.waitForLine(/connected to tunnel server/, 60_000);
    assert.match(
      agent.lines.find((l) => /tunnel server address found/.test(l))!,
      new RegExp(`address=127\\.0\\.0\\.1:${nodePort}`),
    );

    const refused = [...server.lines, ...agent.lines].filter((l) => /forbidden/i.test(l));
    assert.deepEqual(refused, [], 'neither was refused anything');
    // Every certificate came from a CSR the server's approver approved, as from whom it names.
    const csrs = await listCSRs(cp);
    assert.deepEqual([...new Set(csrs.map((c) => c.spec.username))].sort(), ['system:node:edge-m', 'system:serviceaccount:kube-system:yurt-tunnel-server']);
    assert.equal(csrs.filter((c) => c.spec.username === 'system:node:edge-m').length, 1, "the agent's one CSR");
    for (const c of csrs) {
      assert.ok(
        (c.status?.conditions ?? []).some((cond) => cond.type === 'Approved' && cond.reason === APPROVED_REASON),
        `${c.metadata.name} of ${c.spec.username} approved by the server's approver`,
      );
    }
  });

  test("least privilege: the server's ServiceAccount reads no Secret; the agent's node identity reads what it needs and no ConfigMap of ours", async (t) => {
    const can = async (as: string, args: string[]): Promise<boolean> => {
      const r = await cp.kubectl(['auth', 'can-i', ...args, `--as=system:serviceaccount:kube-system:${as}`]);
      return r.stdout.trim() === 'yes';
    };
    // The agent's identity: its node's, under the Node authorizer (the DaemonSet mounts no token).
    const node = async (args: string[]): Promise<boolean> => {
      const r = await cp.kubectl(['auth', 'can-i', ...args, '--as=system:node:edge-m', '--as-group=system:nodes', '--as-group=system:authenticated']);
      return r.stdout.trim() === 'yes';
    };
    for (const args of [
      ['get', 'secrets', '-n', 'kube-system'],
      ['list', 'secrets', '-A'],
      ['watch', 'secrets', '-A'],
    ]) {
      assert.equal(await node(args), false, `node: ${args.join(' ')}`);
      assert.equal(await can('yurt-tunnel-server', args), false, `server: ${args.join(' ')}`);
    }
    // What the agent does with the API: its CSR, the tunnel Service, the cloud Nodes.
    for (const args of [
      ['create', 'certificatesigningrequests'],
      ['get', 'certificatesigningrequests'],
      ['get', 'services/x-tunnel-server-svc', '-n', 'kube-system'],
      ['list', 'nodes'],
    ]) {
      assert.equal(await node(args), true, `node: ${args.join(' ')}`);
    }
    assert.equal(await node(['get', 'configmaps/yurt-tunnel-server-cfg', '-n', 'kube-system']), false, 'no ConfigMap no pod of the node uses');
    assert.equal(await node(['update', 'certificatesigningrequests', '--subresource=approval']), false, 'agents approve nothing');
    assert.equal(await can('yurt-tunnel-server', ['update', 'services/x-tunnel-server-internal-svc', '-n', 'kube-system']), true);
    assert.equal(
      await can('yurt-tunnel-server', ['update', 'services/x-tunnel-server-svc', '-n', 'kube-system']),
      false,
      'the server updates only the internal Service',
    );
    assert.equal(
      await can('yurt-tunnel-server', ['update', 'configmaps/yurt-tunnel-server-cfg', '-n', 'kube-system']),
      false,
      'the server only reads its ConfigMap',
    );
    // The server's CSR approver watches CSRs and approves through /approval.
    const list = (await cp.kubectl(['auth', 'can-i', '--list', '-n', 'kube-system', '--as=system:serviceaccount:kube-system:yurt-tunnel-server'])).stdout;
    t.diagnostic(`yurt-tunnel-server:\n${list}`);
    assert.doesNotMatch(list, /^secrets/m);
    assert.match(list, /^certificatesigningrequests\.certificates\.k8s\.io\s+\[\]\s+\[\]\s+\[create get list watch\]$/m);
    assert.equal(await can('yurt-tunnel-server', ['update', 'certificatesigningrequests', '--subresource=approval']), true);
  });
});
