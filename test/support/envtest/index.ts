// A real Kubernetes control plane for tests (see control-plane.ts), and the
// objects tests put in it.

export { findControlPlane, type ControlPlaneBinaries } from './binaries.js';
export { ControlPlane, startControlPlane, type ControlPlaneOptions, type EgressSelector, type KubectlResult } from './control-plane.js';
export { approvePendingCSRs, autoApprove, deleteObject, listCSRs, putNode, putPod, type NodeSpec } from './objects.js';

import { findControlPlane } from './binaries.js';

/** The reason tests needing a control plane skip here, or undefined when they can run. */
export function controlPlaneSkipReason(): string | undefined {
  const found = findControlPlane();
  return 'missing' in found ? found.missing : undefined;
}
