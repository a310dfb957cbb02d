// `npm run cluster -- status`: what runs where (namespaces, processes and
// whether they still run, each Node's readiness, label and InternalIP) and
// the kubectl to use.

import { alive } from './procs.js';
import { listNodes } from './nodes.js';
import { ADMIN_KUBECONFIG, KUBECTL_WRAPPER, LOG_DIR, readState, STATE_DIR } from './state.js';
import { kubectlCommand } from './kubectl.js';
import { EDGE_LABEL } from './topology.js';

export async function statusText(): Promise<{ up: boolean; text: string }> {
  const state = readState();
  if (state === undefined) return { up: false, text: `the cluster is not up (no ${STATE_DIR}/state.json); start it with \`npm run cluster -- up\`\n` };
  const lines: string[] = [
    `cluster up since ${state.startedAt} (${STATE_DIR})`,
    `network namespaces: ${state.netns.join(', ')}`,
    `route: ${state.route === undefined ? 'none deployed (npm run cluster -- deploy --route egress-selector|iptables|dns)' : `${state.route} (kubectl -n kube-system get pods -o wide)`}`,
    '',
  ];
  const nodes = await listNodes();
  for (const node of state.nodes) {
    const view = nodes.find((n) => n.name === node.name);
    const ready = view === undefined ? 'not registered' : view.ready ? 'Ready' : 'NotReady';
    lines.push(`node ${node.name} (netns ${node.netns}, ${node.address}): ${ready}, ${EDGE_LABEL}=${view?.edge ?? '?'}, InternalIP ${view?.internalIP ?? '?'}`);
    lines.push(`  mount namespace holder pid ${node.holderPid}${alive(node.holderPid) ? '' : ' (GONE)'}`);
    for (const p of node.processes) lines.push(`  ${p.name.padEnd(24)} pid ${String(p.pid).padEnd(8)} ${alive(p.pid) ? 'running' : 'EXITED '}  ${p.log}`);
  }
  lines.push(
    '',
    `admin kubeconfig: ${ADMIN_KUBECONFIG}`,
    `logs: ${LOG_DIR}`,
    `kubectl (kube-apiserver listens in the cloud namespace only): ${KUBECTL_WRAPPER} get nodes -o wide`,
    `  which runs: ${kubectlCommand().join(' ')} get nodes -o wide`,
    '',
  );
  return { up: true, text: lines.join('\n') };
}
