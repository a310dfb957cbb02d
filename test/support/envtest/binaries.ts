// The binaries' lookup lives with the local cluster (hack/cluster/binaries.ts), which uses it too.
export { assetsDir, findClusterBinaries, findControlPlane, type ClusterBinaries, type ControlPlaneBinaries } from '../../../hack/cluster/binaries.js';
