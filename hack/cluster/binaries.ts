// Where the Kubernetes binaries are, the envtest way: KUBEBUILDER_ASSETS
// (default ../shared/envtest beside the repository) holds kube-apiserver,
// kube-controller-manager and, for a real cluster, kube-scheduler, kubelet and
// kube-proxy; TEST_ASSET_* name single binaries; etcd and kubectl may also
// come from PATH (Debian's etcd-server, the machine's kubectl). The tests use
// this file through test/support/envtest.

import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: this file is hack/cluster/binaries.ts, or dist/hack/cluster/binaries.js once built. */
function repoRoot(): string {
  const here = fileURLToPath(new URL('.', import.meta.url));
  return resolve(here, here.includes('/dist/hack/') ? '../../..' : '../..');
}

export interface ControlPlaneBinaries {
  kubeAPIServer: string;
  kubeControllerManager: string;
  etcd: string;
  kubectl: string;
}

export interface ClusterBinaries extends ControlPlaneBinaries {
  kubeScheduler: string;
  kubelet: string;
  kubeProxy: string;
}

function executable(path: string | undefined): string | undefined {
  if (path === undefined || path === '') return undefined;
  try {
    accessSync(path, constants.X_OK);
    return path;
  } catch {
    return undefined;
  }
}

export function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    const found = executable(join(dir, name));
    if (found !== undefined) return found;
  }
  return undefined;
}

export function assetsDir(): string | undefined {
  const fromEnv = process.env.KUBEBUILDER_ASSETS;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  const shared = resolve(repoRoot(), '../shared/envtest');
  return existsSync(shared) ? shared : undefined;
}

function inAssets(name: string): string | undefined {
  const assets = assetsDir();
  return assets === undefined ? undefined : executable(join(assets, name));
}

/** The binaries, or the one reason the tests that need them skip. */
export function findControlPlane(): ControlPlaneBinaries | { missing: string } {
  return find(false) as ControlPlaneBinaries | { missing: string };
}

/** The control plane's binaries and a node's (kube-scheduler, kubelet, kube-proxy), or the one reason they are missing. */
export function findClusterBinaries(): ClusterBinaries | { missing: string } {
  return find(true) as ClusterBinaries | { missing: string };
}

function find(withNode: boolean): Record<string, string> | { missing: string } {
  const assets: Record<string, [name: string, path: string | undefined]> = {
    kubeAPIServer: ['kube-apiserver', executable(process.env.TEST_ASSET_KUBE_APISERVER) ?? inAssets('kube-apiserver')],
    kubeControllerManager: ['kube-controller-manager', executable(process.env.TEST_ASSET_KUBE_CONTROLLER_MANAGER) ?? inAssets('kube-controller-manager')],
  };
  if (withNode) {
    assets.kubeScheduler = ['kube-scheduler', executable(process.env.TEST_ASSET_KUBE_SCHEDULER) ?? inAssets('kube-scheduler')];
    assets.kubelet = ['kubelet', executable(process.env.TEST_ASSET_KUBELET) ?? inAssets('kubelet')];
    assets.kubeProxy = ['kube-proxy', executable(process.env.TEST_ASSET_KUBE_PROXY) ?? inAssets('kube-proxy')];
  }
  const etcd = executable(process.env.TEST_ASSET_ETCD) ?? inAssets('etcd') ?? onPath('etcd');
  const kubectl = executable(process.env.TEST_ASSET_KUBECTL) ?? inAssets('kubectl') ?? onPath('kubectl');
  const hints: string[] = [];
  const missingAssets = Object.values(assets)
    .filter(([, path]) => path === undefined)
    .map(([name]) => name);
  if (missingAssets.length > 0) hints.push(`${missingAssets.join(', ')} (set KUBEBUILDER_ASSETS to their folder)`);
  if (etcd === undefined) hints.push('etcd (apt-get install etcd-server)');
  if (kubectl === undefined) hints.push('kubectl (put it on PATH or in KUBEBUILDER_ASSETS)');
  // hack/run-tests.mjs accepts a skip only with a reason of this form.
  if (hints.length > 0) return { missing: `needs a real control plane, not found here: ${hints.join(', ')}` };
  return { ...Object.fromEntries(Object.entries(assets).map(([key, [, path]]) => [key, path!])), etcd: etcd!, kubectl: kubectl! };
}
