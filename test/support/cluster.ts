// A tunnel server and agents in cluster mode, against a test control plane:
// the server with the administrator's kubeconfig, agents with a kubelet's
// identity, both taking their certificates from CSRs.

import { join } from 'node:path';
import { TunnelAgent } from '../../pkg/agent/app.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { TunnelServer, type ServerOptions } from '../../pkg/server/app.js';
import type { ControlPlane } from './envtest/index.js';
import type { Harness } from './harness.js';
import { MemoryLogger } from './memory-logger.js';

export function clusterServerOptions(dir: string, kubeConfig: string, log: MemoryLogger, extra: Partial<ServerOptions> = {}): ServerOptions {
  return {
    bindAddress: '127.0.0.1',
    tunnelAgentConnectPort: 0,
    securePort: 0,
    insecurePort: 0,
    localhostProxyPorts: [],
    interceptorProxierUDS: join(dir, 'proxier.sock'),
    proxyStrategies: ['destHost'],
    dialTimeoutMs: 3000,
    serverCount: 1,
    certDir: join(dir, 'server-pki'),
    certIPs: [],
    certDNSNames: [],
    kubeConfig,
    enableIptables: true,
    enableDNSController: true,
    keepaliveTimeMs: 10_000,
    keepaliveTimeoutMs: 20_000,
    logger: log,
    csrPollMs: 200,
    ...extra,
  };
}

export async function startClusterServer(
  h: Harness,
  cp: ControlPlane,
  dir: string,
  opts: { log?: MemoryLogger; extra?: Partial<ServerOptions> } = {},
): Promise<TunnelServer> {
  const server = await TunnelServer.start(clusterServerOptions(dir, cp.adminKubeconfig, opts.log ?? new MemoryLogger(2), opts.extra));
  h.defer(() => server.stop());
  return server;
}

/** A kubeconfig with the kubelet's identity of `node` (CN system:node:<node>, O system:nodes), as an agent bootstraps with. */
export async function kubeletKubeconfig(cp: ControlPlane, node: string): Promise<string> {
  const pair = issueCertificate(cp.pki.ca, { commonName: `system:node:${node}`, organizations: ['system:nodes'], usages: ['clientAuth'] });
  return cp.kubeconfigFor(`kubelet-${node}`, pair);
}

export async function startClusterAgent(
  h: Harness,
  cp: ControlPlane,
  server: TunnelServer,
  dir: string,
  node: string,
  log = new MemoryLogger(2),
): Promise<TunnelAgent> {
  const agent = await TunnelAgent.start({
    nodeName: node,
    nodeIP: '127.0.0.1',
    tunnelServerAddr: `127.0.0.1:${server.agentEndpoint.address.port}`,
    certDir: join(dir, `agent-${node}-pki`),
    kubeSource: { kind: 'kubeconfig', path: await kubeletKubeconfig(cp, node) },
    csrPollMs: 200,
    dialTimeoutMs: 3000,
    keepaliveTimeMs: 35_000,
    keepaliveTimeoutMs: 20_000,
    syncIntervalMs: 200,
    syncIntervalCapMs: 1000,
    drainTimeoutMs: 1000,
    logger: log,
  });
  h.defer(() => agent.stop());
  return agent;
}
