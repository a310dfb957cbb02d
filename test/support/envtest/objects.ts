// Test objects in a real cluster: a Node whose status points at a stand-in
// kubelet, a Pod bound to it and Running, CSR approval, all through kubectl.

import type { ControlPlane } from './control-plane.js';

async function must(cp: ControlPlane, args: string[], input?: string): Promise<string> {
  const r = await cp.kubectl(args, input === undefined ? {} : { input });
  if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')} failed (${r.code}): ${r.stderr.trim()}`);
  return r.stdout;
}

export interface NodeSpec {
  internalIP: string;
  kubeletPort: number;
  labels?: Record<string, string>;
}

/** Creates (or updates) a Node and patches its status: InternalIP, kubelet port, Ready. */
export async function putNode(cp: ControlPlane, name: string, spec: NodeSpec): Promise<void> {
  await cp.apply({ apiVersion: 'v1', kind: 'Node', metadata: { name, labels: spec.labels ?? {} } });
  const status = {
    status: {
      addresses: [
        { type: 'InternalIP', address: spec.internalIP },
        { type: 'Hostname', address: name },
      ],
      daemonEndpoints: { kubeletEndpoint: { Port: spec.kubeletPort } },
      conditions: [
        {
          type: 'Ready',
          status: 'True',
          reason: 'KubeletReady',
          message: 'stand-in kubelet',
          lastHeartbeatTime: new Date().toISOString(),
          lastTransitionTime: new Date().toISOString(),
        },
      ],
    },
  };
  await must(cp, ['patch', 'node', name, '--subresource=status', '--type=merge', '-p', JSON.stringify(status)]);
}

/** Creates a Pod with one container on `nodeName` and marks it Running. */
export async function putPod(cp: ControlPlane, namespace: string, name: string, nodeName: string, container = 'c1'): Promise<void> {
  await cp.apply({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace },
    spec: { nodeName, containers: [{ name: container, image: 'registry.invalid/standin:1' }] },
  });
  const now = new Date().toISOString();
  const status = {
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: 'True', lastTransitionTime: now }],
      containerStatuses: [
        { name: container, ready: true, restartCount: 0, image: 'registry.invalid/standin:1', imageID: '', state: { running: { startedAt: now } } },
      ],
    },
  };
  await must(cp, ['patch', 'pod', name, '-n', namespace, '--subresource=status', '--type=merge', '-p', JSON.stringify(status)]);
}

export async function deleteObject(cp: ControlPlane, kind: string, name: string, namespace?: string): Promise<void> {
  await must(cp, ['delete', kind, name, '--ignore-not-found', '--wait=false', ...(namespace ? ['-n', namespace] : [])]);
}

interface CsrList {
  items: {
    metadata: { name: string };
    spec: { signerName: string; username?: string };
    status?: { conditions?: { type: string; reason?: string }[]; certificate?: string };
  }[];
}

export async function listCSRs(cp: ControlPlane): Promise<CsrList['items']> {
  return (JSON.parse(await must(cp, ['get', 'csr', '-o', 'json'])) as CsrList).items;
}

/** Approves every pending CSR whose name starts with `prefix`; returns their names. */
export async function approvePendingCSRs(cp: ControlPlane, prefix = ''): Promise<string[]> {
  const pending = (await listCSRs(cp)).filter((c) => c.metadata.name.startsWith(prefix) && (c.status?.conditions ?? []).length === 0);
  const names = pending.map((c) => c.metadata.name);
  if (names.length > 0) await must(cp, ['certificate', 'approve', ...names]);
  return names;
}

/**
 * Approves pending CSRs with `prefix` as they appear, until stopped: the
 * approver controller a real cluster would run (yurt-controller-manager's).
 */
export function autoApprove(cp: ControlPlane, prefix: string, everyMs = 300): { approved: string[]; stop(): Promise<void> } {
  const approved: string[] = [];
  let stopped = false;
  const loop = (async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- set by stop()
    while (!stopped) {
      try {
        approved.push(...(await approvePendingCSRs(cp, prefix)));
      } catch {
        // The API server may be restarting; try again next round.
      }
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    approved,
    async stop() {
      stopped = true;
      await loop;
    },
  };
}
