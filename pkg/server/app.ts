// yurt-tunnel-server's run sequence: certificates, the tunnel core, the agent
// endpoint and the CONNECT proxier, in that order; stop() undoes all of it.

import { X509Certificate, createPrivateKey, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import type { Registry } from 'prom-client';
import { ensureLocalServerCertificates, type LocalCertificates } from '../certs/local-store.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import { KubeletConnector } from '../interceptor/kubelet-connector.js';
import { MasterServer } from '../interceptor/master-server.js';
import { localhostProxy } from '../interceptor/middleware/localhost-proxy.js';
import { traceRequest } from '../interceptor/middleware/trace-request.js';
import { AgentNodeResolver } from './agent-node-resolver.js';
import { RequestInterceptor } from '../interceptor/request-interceptor.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { AgentEndpoint } from '../tunnel/agent-endpoint.js';
import type { AgentIdentityCheck } from '../tunnel/agent-identity.js';
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
  /** See TunnelOptions.stalledConnectionTimeoutMs. */
  stalledConnectionTimeoutMs?: number;
  /** What an agent's certificate must name; default `strict`. */
  agentIdentityCheck?: AgentIdentityCheck;
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

/** The files a server reads besides its own certificates, read and parsed before anything is built. */
interface ServerFiles {
  clientCA: string | undefined;
  proxyClient: { cert: string; key: string } | undefined;
  kubeletCA: string | undefined;
}

async function readOptional(flag: string, path: string | undefined, kind: 'certificate' | 'key'): Promise<string | undefined> {
  if (path === undefined || path === '') return undefined;
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err: unknown) {
    throw new Error(`${flag}: cannot read ${path}: ${errorMessage(err)}`, { cause: err });
  }
  try {
    if (kind === 'certificate') new X509Certificate(text);
    else createPrivateKey(text);
  } catch (err: unknown) {
    throw new Error(`${flag}: ${path} does not hold a PEM ${kind}: ${errorMessage(err)}`, { cause: err });
  }
  return text;
}

/** Reads and checks every file named by a flag; throws naming the flag and the file. */
export async function readServerFiles(opts: ServerOptions): Promise<ServerFiles> {
  if ((opts.proxyClientCertFile ?? '') === '' !== ((opts.proxyClientKeyFile ?? '') === '')) {
    throw new TypeError('--proxy-client-cert-file and --proxy-client-key-file go together');
  }
  const [clientCA, proxyCert, proxyKey, kubeletCA] = await Promise.all([
    readOptional('--client-ca-file', opts.clientCAFile, 'certificate'),
    readOptional('--proxy-client-cert-file', opts.proxyClientCertFile, 'certificate'),
    readOptional('--proxy-client-key-file', opts.proxyClientKeyFile, 'key'),
    readOptional('--kubelet-ca-file', opts.kubeletCAFile, 'certificate'),
  ]);
  const proxyClient = proxyCert !== undefined && proxyKey !== undefined ? { cert: proxyCert, key: proxyKey } : undefined;
  return { clientCA, proxyClient, kubeletCA };
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
    // Everything that can be wrong with the flags' files is found before anything is built or listens.
    const files = await readServerFiles(opts);
    log.info('no cluster configured: running in local certificate mode', { certDir: opts.certDir });
    const certs = await ensureLocalServerCertificates({
      certDir: opts.certDir,
      certIPs: opts.certIPs,
      certDNSNames: opts.certDNSNames,
    });
    if (certs.caReplacedBecause !== undefined) {
      log.warn(
        'replaced the local CA: the one in --cert-dir was unreadable to Go clients (Go agents, kube-apiserver, kubectl); ' +
          'every agent certificate it issued must be issued again with `yurt-tunnel-server issue-agent-cert`',
        { certDir: opts.certDir, reason: certs.caReplacedBecause },
      );
    }
    if (certs.changed.length > 0) log.info('certificates created', { certDir: opts.certDir, files: certs.changed.join(',') });
    if (opts.enableDNSController) log.info('DNS controller skipped: local mode has no cluster');
    if (opts.enableIptables) log.info('iptables manager skipped: local mode has no cluster');

    const serverID = opts.serverID ?? randomUUID();
    const tunnel = new Tunnel({
      strategies: opts.proxyStrategies,
      dialTimeoutMs: opts.dialTimeoutMs,
      stalledConnectionTimeoutMs: opts.stalledConnectionTimeoutMs,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    let server: TunnelServer;
    try {
      server = TunnelServer.build(serverID, tunnel, certs, files, opts);
    } catch (err: unknown) {
      // A component refused its options: nothing listens yet, but the tunnel's timers run.
      await tunnel.close();
      throw err;
    }
    const { agentEndpoint, proxier, master } = server;
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

  /** Builds every component on the tunnel; listens on nothing. Throws if an option is refused. */
  private static build(
    serverID: string,
    tunnel: Tunnel,
    certs: LocalCertificates,
    files: ServerFiles,
    opts: ServerOptions,
  ): TunnelServer {
    const log = opts.logger;
    const agentEndpoint = new AgentEndpoint(tunnel, {
      host: opts.bindAddress,
      port: opts.tunnelAgentConnectPort,
      tls: { cert: certs.server.cert, key: certs.server.key, ca: certs.ca },
      serverID,
      serverCount: opts.serverCount,
      keepaliveTimeMs: opts.keepaliveTimeMs,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
      identityCheck: opts.agentIdentityCheck,
      maxStreamsPerAgent: opts.maxAgentStreams,
      logger: log,
    });
    const proxier = new HttpConnectServer(tunnel, { path: opts.interceptorProxierUDS, logger: log });

    const kubeletTLS = { ...(files.proxyClient ?? certs.proxyClient), kubeletCA: files.kubeletCA };
    const connector = new KubeletConnector({ udsPath: opts.interceptorProxierUDS, tls: () => kubeletTLS, logger: log });
    const resolver = new AgentNodeResolver(tunnel.registry);
    const localhostPorts = new Set(opts.localhostProxyPorts);
    const master = new MasterServer({
      secure: { host: opts.bindAddress, port: opts.securePort, cert: certs.server.cert, key: certs.server.key, clientCA: files.clientCA ?? certs.ca },
      insecure: { host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress), port: opts.insecurePort },
      middleware: [traceRequest(resolver, log), localhostProxy(() => localhostPorts, resolver)],
      interceptor: new RequestInterceptor(connector, log),
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    return new TunnelServer(serverID, tunnel, agentEndpoint, proxier, master, connector, log);
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
