// yurt-tunnel-server's run sequence: certificates, the tunnel core, the agent
// endpoint and the CONNECT proxier, in that order; stop() undoes all of it.

import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { Registry } from 'prom-client';
import { ensureLocalServerCertificates } from '../certs/local-store.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import type { Logger } from '../log/logger.js';
import { AgentEndpoint } from '../tunnel/agent-endpoint.js';
import type { ProxyStrategy } from '../tunnel/backend-registry.js';
import { Tunnel } from '../tunnel/tunnel.js';

export const DEFAULT_CERT_DIR = '/var/lib/yurttunnel-server/pki';
export const DEFAULT_PROXIER_UDS = '/tmp/interceptor-proxier.sock';

export interface ServerOptions {
  bindAddress: string;
  tunnelAgentConnectPort: number;
  interceptorProxierUDS: string;
  proxyStrategies: ProxyStrategy[];
  dialTimeoutMs: number;
  serverCount: number;
  /** Default: a random UUID. */
  serverID?: string;
  certDir: string;
  certIPs: string[];
  certDNSNames: string[];
  kubeConfig?: string;
  enableIptables: boolean;
  enableDNSController: boolean;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  logger: Logger;
  metricsRegistry?: Registry;
}

/** True when the process can reach a Kubernetes API (a kubeconfig, or running in a pod). */
export function clusterAvailable(kubeConfig: string | undefined): boolean {
  if (kubeConfig !== undefined && kubeConfig !== '') return true;
  return (
    process.env.KUBERNETES_SERVICE_HOST !== undefined &&
    existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')
  );
}

export class TunnelServer {
  private stopping: Promise<void> | undefined;

  private constructor(
    readonly serverID: string,
    readonly tunnel: Tunnel,
    readonly agentEndpoint: AgentEndpoint,
    readonly proxier: HttpConnectServer,
    private readonly log: Logger,
  ) {}

  static async start(opts: ServerOptions): Promise<TunnelServer> {
    const log = opts.logger;
    if (clusterAvailable(opts.kubeConfig)) {
      throw new Error(
        'a Kubernetes cluster is configured (--kube-config or in-cluster), but cluster mode (certificates by CSR, ' +
          'DNS controller, iptables manager) is not implemented in this version; run without --kube-config for local mode',
      );
    }
    log.info('no cluster configured: running in local certificate mode', { certDir: opts.certDir });
    const certs = await ensureLocalServerCertificates({
      certDir: opts.certDir,
      certIPs: opts.certIPs,
      certDNSNames: opts.certDNSNames,
    });
    if (certs.changed.length > 0) log.info('certificates created', { certDir: opts.certDir, files: certs.changed.join(',') });
    if (opts.enableDNSController) log.info('DNS controller skipped: local mode has no cluster');
    if (opts.enableIptables) log.info('iptables manager skipped: local mode has no cluster');

    const serverID = opts.serverID ?? randomUUID();
    const tunnel = new Tunnel({
      strategies: opts.proxyStrategies,
      dialTimeoutMs: opts.dialTimeoutMs,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    const agentEndpoint = new AgentEndpoint(tunnel, {
      host: opts.bindAddress,
      port: opts.tunnelAgentConnectPort,
      tls: { cert: certs.server.cert, key: certs.server.key, ca: certs.ca },
      serverID,
      serverCount: opts.serverCount,
      keepaliveTimeMs: opts.keepaliveTimeMs,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
      logger: log,
    });
    const proxier = new HttpConnectServer(tunnel, { path: opts.interceptorProxierUDS, logger: log });
    const server = new TunnelServer(serverID, tunnel, agentEndpoint, proxier, log);
    try {
      await agentEndpoint.start();
      await proxier.start();
    } catch (err: unknown) {
      await server.stop();
      throw err;
    }
    log.info('yurt-tunnel-server started', {
      serverID,
      agentAddress: `${opts.bindAddress}:${agentEndpoint.address.port}`,
      proxier: opts.interceptorProxierUDS,
      strategies: opts.proxyStrategies.join(','),
    });
    return server;
  }

  /** Stops accepting, fails pending dials, closes every connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      await this.proxier.close();
      await this.tunnel.close();
      await this.agentEndpoint.close();
      this.log.info('yurt-tunnel-server stopped', { serverID: this.serverID });
    })();
    return this.stopping;
  }
}
