// yurt-tunnel-server's run sequence: certificates, the tunnel core, the agent
// endpoint and the CONNECT proxier, in that order; stop() undoes all of it.

import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import type { Registry } from 'prom-client';
import { ensureLocalServerCertificates } from '../certs/local-store.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import { KubeletConnector } from '../interceptor/kubelet-connector.js';
import { MasterServer } from '../interceptor/master-server.js';
import { localhostProxy } from '../interceptor/middleware/localhost-proxy.js';
import { traceRequest } from '../interceptor/middleware/trace-request.js';
import { AgentNodeResolver } from '../interceptor/node-resolver.js';
import { RequestInterceptor } from '../interceptor/request-interceptor.js';
import type { Logger } from '../log/logger.js';
import { AgentEndpoint } from '../tunnel/agent-endpoint.js';
import type { ProxyStrategy } from '../tunnel/backend-registry.js';
import { Tunnel } from '../tunnel/tunnel.js';

export const DEFAULT_CERT_DIR = '/var/lib/yurttunnel-server/pki';
export const DEFAULT_PROXIER_UDS = '/tmp/interceptor-proxier.sock';

export interface ServerOptions {
  bindAddress: string;
  /** HTTP master port's address; default the loopback of the bind address's family. */
  insecureBindAddress?: string;
  tunnelAgentConnectPort: number;
  securePort: number;
  insecurePort: number;
  /** CA of callers' client certificates on the secure port; default (local mode) the local CA. */
  clientCAFile?: string;
  /** Certificate presented to kubelets; default (local mode) issued from the local CA. */
  proxyClientCertFile?: string;
  proxyClientKeyFile?: string;
  /** CA of kubelet serving certificates; without it they are not verified (logged once per node). */
  kubeletCAFile?: string;
  /** Ports served on the edge node's loopback (localhost-proxy-ports). */
  localhostProxyPorts: number[];
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
  /** Concurrent Connect streams per agent (certificate and agentID). Default 4. */
  maxAgentStreams?: number;
  logger: Logger;
  metricsRegistry?: Registry;
}

/** The loopback address of `ip`'s family (the insecure port's default, as OpenYurt). */
export function loopbackFor(ip: string): string {
  return isIP(ip) === 6 ? '::1' : '127.0.0.1';
}

async function readOptional(path: string | undefined): Promise<string | undefined> {
  if (path === undefined || path === '') return undefined;
  try {
    return await readFile(path, 'utf8');
  } catch (err: unknown) {
    throw new Error(`cannot read ${path}: ${(err as Error).message}`);
  }
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
    readonly master: MasterServer,
    private readonly connector: KubeletConnector,
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
      maxStreamsPerAgent: opts.maxAgentStreams,
      logger: log,
    });
    const proxier = new HttpConnectServer(tunnel, { path: opts.interceptorProxierUDS, logger: log });

    const [clientCA, proxyCert, proxyKey, kubeletCA] = await Promise.all([
      readOptional(opts.clientCAFile),
      readOptional(opts.proxyClientCertFile),
      readOptional(opts.proxyClientKeyFile),
      readOptional(opts.kubeletCAFile),
    ]);
    if ((proxyCert === undefined) !== (proxyKey === undefined)) {
      throw new TypeError('--proxy-client-cert-file and --proxy-client-key-file go together');
    }
    const kubeletTLS = {
      cert: proxyCert ?? certs.proxyClient.cert,
      key: proxyKey ?? certs.proxyClient.key,
      kubeletCA,
    };
    const connector = new KubeletConnector({ udsPath: opts.interceptorProxierUDS, tls: () => kubeletTLS, logger: log });
    const resolver = new AgentNodeResolver(tunnel.registry);
    const localhostPorts = new Set(opts.localhostProxyPorts);
    const master = new MasterServer({
      secure: { host: opts.bindAddress, port: opts.securePort, cert: certs.server.cert, key: certs.server.key, clientCA: clientCA ?? certs.ca },
      insecure: { host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress), port: opts.insecurePort },
      middleware: [traceRequest(resolver, log), localhostProxy(() => localhostPorts, resolver)],
      interceptor: new RequestInterceptor(connector, log),
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });

    const server = new TunnelServer(serverID, tunnel, agentEndpoint, proxier, master, connector, log);
    try {
      await agentEndpoint.start();
      await proxier.start();
      await master.start();
    } catch (err: unknown) {
      await server.stop();
      throw err;
    }
    log.info('yurt-tunnel-server started', {
      serverID,
      agentAddress: `${opts.bindAddress}:${agentEndpoint.address.port}`,
      proxier: opts.interceptorProxierUDS,
      securePort: master.address('secure').port,
      insecurePort: master.address('insecure').port,
      strategies: opts.proxyStrategies.join(','),
    });
    return server;
  }

  /** Stops accepting, fails pending dials, closes every connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      await this.master.close();
      this.connector.destroy();
      await this.proxier.close();
      await this.tunnel.close();
      await this.agentEndpoint.close();
      this.log.info('yurt-tunnel-server stopped', { serverID: this.serverID });
    })();
    return this.stopping;
  }
}
