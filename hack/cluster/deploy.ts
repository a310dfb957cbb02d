// Deploying our manifests on the local cluster, as manifests/README.md's
// "Steps" say (issue 34 item 3): a kustomization beside the repository with
// the route's overlay and `images:` naming localhost/yurt-tunnel:dev, the
// cloud node labelled as the control plane the overlays pin the server to,
// kube-apiserver restarted with the route's flags, `kubectl apply -k`, then
// the wait for the server and every edge node's agent Ready.
//
// Every route: egress-selector, iptables and dns. On the DNS route, the
// overlay's yurt-tunnel-dns (CoreDNS, from a registry this machine cannot
// reach) is scaled to 0 in the user's kustomization, and dnsmasq in the cloud
// node serves the records instead (dns-resolver.ts).

import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { REPO_ROOT } from '../local-tunnel.js';
import type { ClusterBinaries } from './binaries.js';
import { restartAPIServer } from './control-plane.js';
import { startResolver, stopResolver } from './dns-resolver.js';
import { privatePath } from './holder.js';
import { imageBaseName, LOCAL_IMAGE } from './images.js';
import { kubectl, mustKubectl, waitFor } from './kubectl.js';
import { STATE_DIR, writeState, type ClusterState, type NodeState } from './state.js';
import { CLOUD, NODES, type NodeSpec } from './topology.js';

export const ROUTES = ['egress-selector', 'iptables', 'dns'] as const;
export type Route = (typeof ROUTES)[number];

export function isRoute(value: string): value is Route {
  return (ROUTES as readonly string[]).includes(value);
}

const EGRESS_CONFIG = '/etc/kubernetes/egress-selector-configuration.yaml';

/** kube-apiserver's flags for `route` (manifests/README.md step 6), after the files they name are in place. */
async function prepareAPIServer(state: ClusterState, cloud: NodeState, route: Route, manifests: string): Promise<string[]> {
  switch (route) {
    case 'egress-selector':
      copyFileSync(
        join(manifests, 'overlays/egress-selector/kube-apiserver/egress-selector-grpc.yaml'),
        join(privatePath(CLOUD.name, '/etc/kubernetes'), 'egress-selector-configuration.yaml'),
      );
      return [`--egress-selector-config-file=${EGRESS_CONFIG}`];
    case 'iptables':
      // The tunnel ends TLS for every edge kubelet: kube-apiserver must not verify kubelet certificates.
      return ['--kubelet-certificate-authority='];
    case 'dns':
      // As OpenYurt's DNS mode needs: kubelets by node name, which the cloud node's resolver answers with the
      // records; the tunnel's master port answers for an edge kubelet, so no kubelet certificate is verified.
      await startResolver(state, cloud);
      return ['--kubelet-certificate-authority=', '--kubelet-preferred-address-types=', '--kubelet-preferred-address-types=Hostname,InternalIP'];
  }
}

/** The user's kustomization of manifests/README.md step 2, in the state folder (kustomize wants relative paths). */
function writeKustomization(route: Route, manifests: string, ha: boolean): string {
  const dir = join(STATE_DIR, 'deploy', route);
  mkdirSync(dir, { recursive: true });
  const overlay = relative(dir, join(manifests, 'overlays', route));
  const tag = LOCAL_IMAGE.slice(LOCAL_IMAGE.lastIndexOf(':') + 1);
  writeFileSync(
    join(dir, 'kustomization.yaml'),
    [
      'apiVersion: kustomize.config.k8s.io/v1beta1',
      'kind: Kustomization',
      'resources:',
      `- ${overlay}`,
      ...(ha ? ['components:', `- ${relative(dir, join(manifests, 'components/ha'))}`] : []),
      'images:',
      '- name: yurt-tunnel',
      `  newName: ${imageBaseName(LOCAL_IMAGE)}`,
      `  newTag: ${tag}`,
      ...(route === 'dns'
        ? [
            '# No CoreDNS image here: dnsmasq in the cloud node serves the records (hack/cluster/dns-resolver.ts).',
            'replicas:',
            '- name: yurt-tunnel-dns',
            '  count: 0',
          ]
        : []),
      '',
    ].join('\n'),
  );
  return dir;
}

interface PodList {
  items: {
    metadata: { name: string; namespace: string };
    spec: { nodeName?: string };
    status: {
      phase?: string;
      conditions?: { type: string; status: string }[];
      containerStatuses?: { name: string; ready: boolean; restartCount: number; state?: object }[];
    };
  }[];
}

const ready = (p: PodList['items'][number]): boolean => p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

async function tunnelPods(): Promise<PodList['items']> {
  const r = await kubectl(['-n', 'kube-system', 'get', 'pods', '-l', 'k8s-app in (yurt-tunnel-server,yurt-tunnel-agent)', '-o', 'json']);
  return r.code === 0 ? (JSON.parse(r.stdout) as PodList).items : [];
}

/** The last lines a pod's container wrote, read from its node's /var/log/pods (kubectl logs cannot reach an edge node without the tunnel). */
function podLogTail(node: string, namespace: string, pod: string, lines = 8): string {
  const root = privatePath(node, '/var/log/pods');
  const dir = existsSync(root) ? readdirSync(root).find((d) => d.startsWith(`${namespace}_${pod}_`)) : undefined;
  if (dir === undefined) return '(no log)';
  const out: string[] = [];
  for (const container of readdirSync(join(root, dir))) {
    for (const file of readdirSync(join(root, dir, container)).sort()) {
      const text = readFileSync(join(root, dir, container, file), 'utf8')
        .trimEnd()
        .split('\n')
        .slice(-lines);
      out.push(`  ${container}/${file}:`, ...text.map((l) => `    ${l.replace(/^\S+ std(out|err) [FP] /, '')}`));
    }
  }
  return out.join('\n');
}

async function describeTunnelPods(): Promise<string> {
  const pods = await tunnelPods();
  if (pods.length === 0) return 'no server or agent pod';
  return pods
    .map((p) => {
      const containers = (p.status.containerStatuses ?? [])
        .map((c) => `${c.name} ready=${c.ready} restarts=${c.restartCount} ${JSON.stringify(c.state)}`)
        .join('; ');
      return `${p.metadata.name} on ${p.spec.nodeName ?? '?'}: ${p.status.phase ?? '?'} ${containers}\n${p.spec.nodeName === undefined ? '' : podLogTail(p.spec.nodeName, p.metadata.namespace, p.metadata.name)}`;
    })
    .join('\n');
}

/** The repository's manifests, or another checkout's (`up --manifests DIR`: e.g. a branch's, on this cluster). */
export const DEFAULT_MANIFESTS = join(REPO_ROOT, 'manifests');

/**
 * Deploys on `route`, replacing what an earlier deploy left (`npm run cluster -- deploy`
 * reconfigures a running cluster: each route on the same cluster, one after the other).
 */
export interface DeployOptions {
  /** The manifests folder (default: this repository's). */
  manifests?: string;
  /** Progress lines, one per step with its time. */
  progress?: (line: string) => void;
  /**
   * With the HA component (two server replicas, a node each: second-cloud-node.ts adds the second). On the
   * route already deployed, only the changed kustomization is applied (kube-apiserver keeps running).
   */
  ha?: boolean;
  /** Called just before `kubectl apply -k` (the real-cluster test times apply → first kubectl logs from here). */
  applying?: () => void;
  timeoutMs?: number;
}

export async function deploy(state: ClusterState, route: Route, bins: ClusterBinaries, opts: DeployOptions = {}): Promise<void> {
  const cloud = state.nodes.find((n) => n.name === CLOUD.name);
  if (cloud === undefined) throw new Error('no cloud node in the state: is the cluster up?');
  const manifests = opts.manifests ?? DEFAULT_MANIFESTS;
  let t0 = Date.now();
  const done = (what: string): void => {
    opts.progress?.(`  ${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    t0 = Date.now();
  };
  const again = state.route === route;
  if (state.route !== undefined && !again) {
    await undeploy(state);
    done('the previous route removed');
  }
  if (!again) {
    // Step 3: the overlays pin the server to control-plane nodes (a kubelet may not set node-role labels itself).
    await mustKubectl(['label', 'node', CLOUD.name, 'node-role.kubernetes.io/control-plane=', '--overwrite']);
    // Step 6, before the apply: kube-apiserver with the route's flags.
    await restartAPIServer(state, cloud, bins, await prepareAPIServer(state, cloud, route, manifests));
    done(`kube-apiserver restarted with the ${route} route's flags`);
  }
  // Steps 2 and 4.
  const dir = writeKustomization(route, manifests, opts.ha ?? false);
  await mustKubectl(['apply', '--dry-run=server', '-k', dir]);
  opts.applying?.();
  await mustKubectl(['apply', '-k', dir]);
  state.route = route;
  writeState(state);
  done(`kubectl apply -k ${dir}`);
  // Step 7: the server and one agent per edge node Ready.
  const edges: NodeSpec[] = NODES.filter((n) => n.role === 'edge');
  await waitFor(
    `the ${route} route's server and agents Ready`,
    opts.timeoutMs ?? 240_000,
    async () => {
      const pods = await tunnelPods();
      const server = pods.some((p) => p.metadata.name.startsWith('yurt-tunnel-server-') && ready(p));
      const agents = edges.every((e) => pods.some((p) => p.metadata.name.startsWith('yurt-tunnel-agent-') && p.spec.nodeName === e.name && ready(p)));
      return server && agents ? true : undefined;
    },
    async () => `${await describeTunnelPods()}\n${(await kubectl(['get', 'csr'])).stdout}`,
  );
  done('the server and an agent on every edge node Ready');
}

/** Deletes what the last deploy applied and waits for its pods to end (the server removes its iptables rules as it stops). */
export async function undeploy(state: ClusterState): Promise<void> {
  if (state.route === undefined) return;
  await mustKubectl(['delete', '-k', join(STATE_DIR, 'deploy', state.route), '--ignore-not-found', '--wait=true', '--timeout=120s']);
  await waitFor('the old server and agent pods gone', 120_000, async () => ((await tunnelPods()).length === 0 ? true : undefined), describeTunnelPods);
  const cloud = state.nodes.find((n) => n.name === CLOUD.name);
  if (state.route === 'dns' && cloud !== undefined) await stopResolver(state, cloud);
  delete state.route;
  writeState(state);
}
