// Where the control-plane binaries are, the envtest way: KUBEBUILDER_ASSETS
// (default ../shared/envtest beside the repository) holds kube-apiserver and
// kube-controller-manager; TEST_ASSET_* name single binaries; etcd and
// kubectl may also come from PATH (Debian's etcd-server, the machine's kubectl).

import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { repoRoot } from '../upstream.js';

export interface ControlPlaneBinaries {
  kubeAPIServer: string;
  kubeControllerManager: string;
  etcd: string;
  kubectl: string;
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

function onPath(name: string): string | undefined {
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

/** The binaries, or the one reason the tests that need them skip. */
export function findControlPlane(): ControlPlaneBinaries | { missing: string } {
  const assets = assetsDir();
  const inAssets = (name: string): string | undefined => (assets === undefined ? undefined : executable(join(assets, name)));
  const found = {
    kubeAPIServer: executable(process.env.TEST_ASSET_KUBE_APISERVER) ?? inAssets('kube-apiserver'),
    kubeControllerManager: executable(process.env.TEST_ASSET_KUBE_CONTROLLER_MANAGER) ?? inAssets('kube-controller-manager'),
    etcd: executable(process.env.TEST_ASSET_ETCD) ?? inAssets('etcd') ?? onPath('etcd'),
    kubectl: executable(process.env.TEST_ASSET_KUBECTL) ?? inAssets('kubectl') ?? onPath('kubectl'),
  };
  const hints: string[] = [];
  const missingAssets = [
    ['kube-apiserver', found.kubeAPIServer],
    ['kube-controller-manager', found.kubeControllerManager],
  ]
    .filter(([, path]) => path === undefined)
    .map(([name]) => name);
  if (missingAssets.length > 0) hints.push(`${missingAssets.join(', ')} (set KUBEBUILDER_ASSETS to their folder)`);
  if (found.etcd === undefined) hints.push('etcd (apt-get install etcd-server)');
  if (found.kubectl === undefined) hints.push('kubectl (put it on PATH or in KUBEBUILDER_ASSETS)');
  // hack/run-tests.mjs accepts a skip only with a reason of this form.
  if (hints.length > 0) return { missing: `needs a real control plane, not found here: ${hints.join(', ')}` };
  return found as ControlPlaneBinaries;
}
