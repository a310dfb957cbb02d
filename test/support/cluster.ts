// A tunnel server and agents in cluster mode, against a test control plane:
// the server with the administrator's kubeconfig, agents with a kubelet's
// identity, both taking their certificates from CSRs.

import { join } from 'node:path';
import { TunnelAgent, type AgentOptions } from '../../pkg/agent/app.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { TunnelServer } from '../../pkg/server/app.js';
import type { ServerOptions } from '../../pkg/server/options.js';
import type { ControlPlane } from './envtest/index.js';
import type { Harness } from './harness.js';
import { MemoryLogger } from './memory-logger.js';
import { testServerOptions } from './server-options.js';

/** In-process servers share the root network namespace: never with the iptables manager (test/netns runs it inside namespaces). */
export function clusterServerOptions(dir: string, kubeConfig: string, log: MemoryLogger, extra: Partial<ServerOptions> = {}): ServerOptions {
  return testServerOptions(dir, { kubeConfig, enableIptables: false, enableDNSController: true, logger: log, csrPollMs: 200, ...extra });
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

/** An in-process agent for `server` with the tests' timings; `opts` says how it gets its certificate. */
export async function startTestAgent(
  h: Harness,
  server: TunnelServer,
  opts: Pick<AgentOptions, 'nodeName' | 'certDir'> & Partial<AgentOptions>,
): Promise<TunnelAgent> {
  const agent = await TunnelAgent.start({
    nodeIP: '127.0.0.1',
    tunnelServerAddr: `127.0.0.1:${server.agentEndpoint.address.port}`,
    csrPollMs: 200,
    dialTimeoutMs: 3000,
    keepaliveTimeMs: 35_000,
    keepaliveTimeoutMs: 20_000,
    syncIntervalMs: 200,
    syncIntervalCapMs: 1000,
    drainTimeoutMs: 1000,
    logger: new MemoryLogger(2),
    ...opts,
  });
  h.defer(() => agent.stop());
  return agent;
}

/**
 * An agent that bootstraps its certificate with node `node`'s kubelet identity;
 * `extra` overrides the tests' options (e.g. tunnelServerAddr: a relay in front of `server`).
 */
export async function startClusterAgent(
  h: Harness,
  cp: ControlPlane,
  server: TunnelServer,
  dir: string,
  node: string,
  extra: Partial<AgentOptions> = {},
): Promise<TunnelAgent> {
  return startTestAgent(h, server, {
    nodeName: node,
    certDir: join(dir, `agent-${node}-pki`),
    kubeSource: { kind: 'kubeconfig', path: await kubeletKubeconfig(cp, node) },
    logger: new MemoryLogger(2),
    ...extra,
  });
}
