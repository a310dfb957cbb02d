// What the live server-ConfigMap tests share: a control plane, a cluster-mode
// server (its log kept at -v=2 for the tests to read) and agent edge-1 at a
// node address, registered, with the ConfigMap informer synced; and a way to
// change kube-system/yurt-tunnel-server-cfg and wait until the server took it.

import type { ServerConfig } from '../../pkg/kube/server-config.js';
import type { ServerOptions } from '../../pkg/server/options.js';
import type { TunnelServer } from '../../pkg/server/app.js';
import { startClusterAgent, startClusterServer } from './cluster.js';
import { autoApprove, deleteObject, putNode, startControlPlane, type ControlPlane } from './envtest/index.js';
import type { Harness } from './harness.js';
import { MemoryLogger } from './memory-logger.js';
import { tempDir, waitFor } from './tunnel.js';

/** How long the server may take to apply a ConfigMap change (the informer sees it within a second or two). */
const TAKE_MS = 20_000;

export interface ServerConfigRig {
  cp: ControlPlane;
  server: TunnelServer;
  log: MemoryLogger;
  /** Applies the ConfigMap (or deletes it, for undefined) and resolves with the config the server took from it. */
  setConfigMap: (data: Record<string, string> | undefined) => Promise<ServerConfig>;
}

export async function startServerConfigRig(h: Harness, nodeIP: string, extra: Partial<ServerOptions> = {}): Promise<ServerConfigRig> {
  const cp = await startControlPlane({ controllerManager: true });
  h.defer(() => cp.stop());
  const approver = autoApprove(cp, 'yurttunnel-');
  h.defer(() => approver.stop());
  const dir = await tempDir(h, 'yt-servercfg-');
  await putNode(cp, 'edge-1', { internalIP: nodeIP, kubeletPort: 10250 });
  const log = new MemoryLogger(2);
  const server = await startClusterServer(h, cp, dir, { log, extra });
  await startClusterAgent(h, cp, server, dir, 'edge-1', { nodeIP });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1, 20_000);
  const config = server.cluster!.config;
  await config.waitForSync();

  async function setConfigMap(data: Record<string, string> | undefined): Promise<ServerConfig> {
    // A change the server does not see as one (it keeps the config it has) fails here instead of hanging the suite.
    const changed = new Promise<ServerConfig>((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`the server did not take the ConfigMap change within ${TAKE_MS} ms: ${JSON.stringify(data)}`));
      }, TAKE_MS);
      const off = config.subscribe((now) => {
        clearTimeout(timer);
        off();
        resolve(now);
      });
    });
    if (data === undefined) await deleteObject(cp, 'configmap', 'yurt-tunnel-server-cfg', 'kube-system');
    else await cp.apply({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'yurt-tunnel-server-cfg', namespace: 'kube-system' }, data });
    return changed;
  }
  return { cp, server, log, setConfigMap };
}
