// The real Konnectivity Go binaries (shared/konnectivity/): where they are,
// and a reason to skip when they are not. KONNECTIVITY_BIN_DIR overrides the
// folder, as envtest's KUBEBUILDER_ASSETS does for the control plane.

import { accessSync, constants } from 'node:fs';
import { join, resolve } from 'node:path';
import { repoRoot } from './upstream.js';

export interface KonnectivityBinaries {
  proxyServer: string;
  proxyAgent: string;
}

export function konnectivityDir(): string {
  return process.env.KONNECTIVITY_BIN_DIR ?? resolve(repoRoot(), '../shared/konnectivity');
}

/** The binaries, or a one-line reason why the tests that need them skip. */
export function findKonnectivity(): KonnectivityBinaries | string {
  const dir = konnectivityDir();
  const bins = { proxyServer: join(dir, 'proxy-server'), proxyAgent: join(dir, 'proxy-agent') };
  for (const path of Object.values(bins)) {
    try {
      accessSync(path, constants.X_OK);
    } catch {
      return `the Konnectivity Go binaries are not at ${dir} (set KONNECTIVITY_BIN_DIR to their folder)`;
    }
  }
  return bins;
}
