// The control plane's certificates live with the local cluster (hack/cluster/pki.ts), which uses them too.
export { controlPlanePKI, kubeconfigYAML, type ControlPlanePKI } from '../../../hack/cluster/pki.js';
