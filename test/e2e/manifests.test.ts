// The manifests (manifests/), as the README's "Deploying" section uses them,
// against a real kube-apiserver: kustomize builds the base and every overlay;
// everything applies with --dry-run=server and then for real; the rendered
// objects have what they promise (host network, probes on the meta ports,
// resources, NET_ADMIN only for iptables, the CoreDNS hosts setup, the
// EgressSelectorConfiguration matching the server's socket); every flag they
// pass exists; the server runs with the Deployment's arguments as its
// ServiceAccount (a TokenRequest token) and is refused nothing; the agent runs
// as its ServiceAccount, finds the server from the manifests' NodePort
// Service, and may not read Secrets or write Nodes.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { connect, createServer, type Socket } from 'node:net';
import { join, relative } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { autoApprove, controlPlaneSkipReason, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness, suiteHarness, type Harness } from '../support/harness.js';
import { AGENT_BIN, runProcess, SERVER_BIN, startProcess } from '../support/processes.js';
import { tempDir } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';
import { localServerFlags } from '../../hack/local-tunnel.js';

const skip = controlPlaneSkipReason();

const MANIFESTS = join(repoRoot(), 'manifests');
const OVERLAYS = ['iptables', 'dns', 'egress-selector'] as const;

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
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  startupProbe?: Probe;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: { capabilities?: { add?: string[] } };
  volumeMounts?: { name: string; mountPath: string }[];
}
interface PodSpec {
  hostNetwork?: boolean;
  serviceAccountName?: string;
  containers: Container[];
  initContainers?: Container[];
  volumes?: { name: string; hostPath?: { path: string }; configMap?: { name: string } }[];
  affinity?: { podAntiAffinity?: unknown };
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

/** kube-proxy's part for a node port: 127.0.0.1:<listenPort> forwards to `targetPort`. */
async function nodePortRelay(h: Harness, listenPort: number, targetPort: number): Promise<void> {
  const sockets = new Set<Socket>();
  const relay = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => (client.destroy(), upstream.destroy(), sockets.delete(s)));
    }
    client.pipe(upstream).pipe(client);
  });
  relay.listen(listenPort, '127.0.0.1');
  await once(relay, 'listening');
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => relay.close(r));
  });
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

  test('Deploying, as the README says: your kustomization (image, HA), the server as its ServiceAccount refused nothing, the agent as its own', async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h);
    // The README's kustomization, beside the repository.
    const mine = join(dir, 'my-tunnel');
    await mkdir(mine);
    await writeFile(
      join(mine, 'kustomization.yaml'),
      [
        'apiVersion: kustomize.config.k8s.io/v1beta1',
        'kind: Kustomization',
        'resources:',
        `- ${relative(mine, join(MANIFESTS, 'overlays/dns'))}`,
        'components:',
        `- ${relative(mine, join(MANIFESTS, 'components/ha'))}`,
        'images:',
        '- name: yurt-tunnel',
        '  newName: registry.example.com/yurt-tunnel',
        '  newTag: 0.1.0',
        '',
      ].join('\n'),
    );
    const yaml = await kubectl(['kustomize', mine]);
    assert.doesNotMatch(yaml, /image: yurt-tunnel$/m, 'every placeholder image replaced');
    await kubectl(['apply', '--dry-run=server', '-k', mine]);
    await kubectl(['apply', '-k', mine]);
    const deployment = JSON.parse(await kubectl(['get', 'deployment', '-n', 'kube-system', 'yurt-tunnel-server', '-o', 'json'])) as Workload;
    assert.equal(deployment.spec.replicas, 2);
    assert.equal(envOf(deployment.spec.template.spec.containers[0]!).SERVER_COUNT, '2');
    assert.ok(deployment.spec.template.spec.affinity?.podAntiAffinity !== undefined);
    await kubectl(['get', 'pdb', '-n', 'kube-system', 'yurt-tunnel-server']);
    // The nodes: one cloud node, one edge node (the README's labels).
    await putNode(cp, 'cloud-m', { internalIP: '127.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'false' } });
    await putNode(cp, 'edge-m', { internalIP: '127.0.0.1', kubeletPort: 10250, labels: { 'openyurt.io/is-edge-worker': 'true' } });
    // The operator (or an approver) approves the tunnel's CSRs.
    const approver = autoApprove(cp, 'yurttunnel-');
    h.defer(() => approver.stop());

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

    // The agent with its DaemonSet's arguments, as its ServiceAccount; it finds the server from the NodePort Service.
    const nodePort = Number(await kubectl(['get', 'svc', '-n', 'kube-system', 'x-tunnel-server-svc', '-o', 'jsonpath={.spec.ports[0].nodePort}']));
    await nodePortRelay(h, nodePort, agentPort);
    const daemonSet = JSON.parse(await kubectl(['get', 'daemonset', '-n', 'kube-system', 'yurt-tunnel-agent', '-o', 'json'])) as Workload;
    const agentContainer = daemonSet.spec.template.spec.containers[0]!;
    const agentArgs = expand(agentContainer.args!, {
      ...envOf(agentContainer),
      NODE_NAME: 'edge-m',
      NODE_IP: '127.0.0.1',
      KUBERNETES_SERVICE_HOST: '127.0.0.1',
      KUBERNETES_SERVICE_PORT: String(cp.port),
    });
    const agent = startProcess(h, AGENT_BIN, [
      ...agentArgs,
      // The pod's token file is at a fixed path; the same token, through a kubeconfig.
      '--kube-config',
      await token('yurt-tunnel-agent'),
      '--cert-dir',
      join(dir, 'agent-pki'),
      '--meta-port',
      '0',
    ]);
    await agent.waitForLine(/connected to tunnel server/, 60_000);
    assert.match(
      agent.lines.find((l) => /tunnel server address found/.test(l))!,
      new RegExp(`address=127\\.0\\.0\\.1:${nodePort}`),
    );

    const refused = [...server.lines, ...agent.lines].filter((l) => /forbidden/i.test(l));
    assert.deepEqual(refused, [], 'neither was refused anything');
  });

  test('least privilege: the agent ServiceAccount reads no Secret and writes no Node; what each may do is listed', async (t) => {
    const can = async (as: string, args: string[]): Promise<boolean> => {
      const r = await cp.kubectl(['auth', 'can-i', ...args, `--as=system:serviceaccount:kube-system:${as}`]);
      return r.stdout.trim() === 'yes';
    };
    for (const args of [
      ['get', 'secrets', '-n', 'kube-system'],
      ['list', 'secrets', '-A'],
      ['watch', 'secrets', '-A'],
    ]) {
      assert.equal(await can('yurt-tunnel-agent', args), false, `agent: ${args.join(' ')}`);
      assert.equal(await can('yurt-tunnel-server', args), false, `server: ${args.join(' ')}`);
    }
    for (const verb of ['create', 'update', 'patch', 'delete']) {
      assert.equal(await can('yurt-tunnel-agent', [verb, 'nodes']), false, `agent: ${verb} nodes`);
      assert.equal(await can('yurt-tunnel-agent', [verb, 'nodes/status']), false, `agent: ${verb} nodes/status`);
    }
    assert.equal(await can('yurt-tunnel-agent', ['get', 'services/x-tunnel-server-svc', '-n', 'kube-system']), true);
    assert.equal(await can('yurt-tunnel-agent', ['get', 'services/kube-dns', '-n', 'kube-system']), false, 'only its Service');
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
    // The server's CSR approver watches CSRs and approves through /approval; the agent only makes its own.
    for (const [sa, verbs] of [
      ['yurt-tunnel-server', 'create get list watch'],
      ['yurt-tunnel-agent', 'create get'],
    ] as const) {
      const list = (await cp.kubectl(['auth', 'can-i', '--list', '-n', 'kube-system', `--as=system:serviceaccount:kube-system:${sa}`])).stdout;
      t.diagnostic(`${sa}:\n${list}`);
      assert.doesNotMatch(list, /^secrets/m);
      assert.match(list, new RegExp(`^certificatesigningrequests\\.certificates\\.k8s\\.io\\s+\\[\\]\\s+\\[\\]\\s+\\[${verbs}\\]$`, 'm'));
    }
    assert.equal(await can('yurt-tunnel-server', ['update', 'certificatesigningrequests', '--subresource=approval']), true);
    assert.equal(await can('yurt-tunnel-agent', ['update', 'certificatesigningrequests', '--subresource=approval']), false, 'agents approve nothing');
  });
});
