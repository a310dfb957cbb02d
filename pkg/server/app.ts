// yurt-tunnel-server's run sequence: certificates, the tunnel core, the agent
// endpoint and the CONNECT proxier, in that order; stop() undoes all of it.

import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import { Registry } from 'prom-client';
import { GarbageAfterFlood } from '../meta/garbage-after-flood.js';
import { MetaServer } from '../meta/meta-server.js';
import { PROFILING_ROUTES } from '../meta/profiling.js';
import { agentStatuses, connectionStatuses } from '../tunnel/debug.js';
import { ensureLocalServerCertificates } from '../certs/local-store.js';
import type { CertKeyPair } from '../certs/pki.js';
import { GrpcProxyServer } from '../frontend/grpc-proxy.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import { KubeletConnector } from '../interceptor/kubelet-connector.js';
import { MasterServer } from '../interceptor/master-server.js';
import { localhostProxy } from '../interceptor/middleware/localhost-proxy.js';
import { masterPortTLS } from '../interceptor/middleware/master-port-tls.js';
import { traceRequest } from '../interceptor/middleware/trace-request.js';
import { NodeResolverChain } from '../nodes/node-resolver.js';
import { serverKubeConfigSource } from '../kube/config-source.js';
import { defaultServerConfig, masterPortMappings, type ServerConfig } from '../kube/server-config.js';
import { AgentNodeResolver } from './agent-node-resolver.js';
import type { ClusterServices } from './cluster.js';
import { RequestInterceptor } from '../interceptor/request-interceptor.js';
import { IptablesManager, MIN_SYNC_PERIOD_MS, DEFAULT_SYNC_PERIOD_MS } from '../iptables/manager.js';
import type { Logger } from '../log/logger.js';
import { readPemFile } from '../certs/read-pem.js';
import { IptablesError } from '../protocol/errors.js';
import { AgentEndpoint } from '../endpoint/agent-endpoint.js';
import type { AgentIdentityCheck } from '../endpoint/agent-identity.js';
import type { ProxyStrategy } from '../tunnel/backend-registry.js';
import { Tunnel } from '../tunnel/tunnel.js';

export const DEFAULT_CERT_DIR = '/var/lib/yurttunnel-server/pki';
export const DEFAULT_PROXIER_UDS = '/tmp/interceptor-proxier.sock';
export const DEFAULT_EGRESS_SELECTOR_UDS = '/tmp/yurt-tunnel-egress-selector.sock';

/** How kube-apiserver's egress selector speaks to us (its proxyProtocol). */
export type EgressSelectorMode = 'http-connect' | 'grpc';
export const EGRESS_SELECTOR_MODES: readonly EgressSelectorMode[] = ['http-connect', 'grpc'];

/** A frontend kube-apiserver's egress selector dials: HTTP CONNECT or ProxyService over a Unix socket. */
interface EgressFrontend {
  readonly connectionCount: number;
  start(): Promise<void>;
  stopAccepting(): void;
  close(): Promise<void>;
}

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
  /** Serve kube-apiserver's egress selector on egressSelectorUDS, in egressSelectorMode. */
  egressSelector?: { uds: string; mode: EgressSelectorMode };
  proxyStrategies: ProxyStrategy[];
  dialTimeoutMs: number;
  /** See TunnelOptions.stalledConnectionTimeoutMs. */
  stalledConnectionTimeoutMs?: number;
  /** See TunnelOptions.lingerAfterEndMs (agents that cannot half-close). */
  halfClosedLingerMs?: number;
  /** What an agent's certificate must name; default `strict`. */
  agentIdentityCheck?: AgentIdentityCheck;
  /** Time a caller on the secure master port, or an agent, has for its TLS handshake. Default 10 s. */
  tlsHandshakeTimeoutMs?: number;
  /** Time a caller on a master port has for its request head. Default 30 s. */
  requestHeadTimeoutMs?: number;
  /** Time a client of the proxier or egress socket has for its CONNECT head (or its first gRPC call). Default 10 s. */
  connectHeadTimeoutMs?: number;
  /** See TunnelOptions.maxPendingDialsPerAgent. */
  maxPendingDialsPerAgent?: number;
  /** See TunnelOptions.maxUnknownPacketsPerAgent. */
  maxUnknownPacketsPerAgent?: number;
  serverCount: number;
  /** Default: a random UUID. */
  serverID?: string;
  certDir: string;
  certIPs: string[];
  certDNSNames: string[];
  kubeConfig?: string;
  /** Cluster mode: run the iptables manager (DNAT of this host's connections to nodes' kubelet ports to the master ports). */
  enableIptables: boolean;
  /** Its full check against the nat table; default 60 s, at least 15 s. */
  iptablesSyncPeriodMs?: number;
  enableDNSController: boolean;
  /** The DNS controller's full resync (--dns-sync-period); default 1800 s, at least 30 s. */
  dnsSyncPeriodMs?: number;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** Concurrent Connect streams per agent (certificate and agentID). Default 4. */
  maxAgentStreams?: number;
  /** New agent streams admitted per second; 0 admits all. Default 100. */
  maxAgentConnectRate?: number;
  /** The meta server (/healthz, /readyz, /metrics, /debug/*): port (10265; 0 picks one) on insecureBindAddress. */
  metaPort?: number;
  /** Serve CPU profiles and heap snapshots on the meta port. */
  enableProfiling?: boolean;
  logger: Logger;
  metricsRegistry?: Registry;
  /** Cluster mode: how often a pending CertificateSigningRequest is read (default 1 s). */
  csrPollMs?: number;
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
  return readPemFile(path, { namedBy: flag, kind });
}

/** Reads and checks every file named by a flag; throws naming the flag and the file. */
export async function readServerFiles(opts: ServerOptions): Promise<ServerFiles> {
  if (opts.egressSelector !== undefined && opts.egressSelector.uds === opts.interceptorProxierUDS) {
    throw new TypeError(`--egress-selector-uds and --interceptor-proxier-uds are both ${opts.interceptorProxierUDS}; give each its own socket`);
  }
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

/** The certificates the listeners and the kubelet connector use, whichever mode made them. */
interface ServerCertificates {
  /** CA bundle of agents' client certificates (and, by default, of callers on the secure port). */
  ca: string;
  server: CertKeyPair;
  proxyClient: CertKeyPair;
}

async function localCertificates(opts: ServerOptions): Promise<ServerCertificates> {
  const log = opts.logger;
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
  return { ca: certs.ca, server: certs.server, proxyClient: certs.proxyClient };
}

async function clusterCertificates(cluster: ClusterServices, opts: ServerOptions): Promise<ServerCertificates> {
  const log = opts.logger;
  if (cluster.serving.current() === undefined || cluster.proxyClient.current() === undefined) {
    log.info('waiting for the serving and proxy-client certificates (CertificateSigningRequests) before listening', {
      certDir: opts.certDir,
    });
  }
  const { serving, proxyClient } = await cluster.certificates();
  return { ca: cluster.clusterCA, server: serving, proxyClient };
}

/**
 * The iptables manager on the master ports' bound addresses. A manager that
 * cannot start (no iptables, no NET_ADMIN) is one error in the log; the
 * server serves on without it.
 */
async function startIptables(cluster: ClusterServices, master: MasterServer, opts: ServerOptions): Promise<IptablesManager | undefined> {
  const log = opts.logger;
  let syncPeriodMs = opts.iptablesSyncPeriodMs ?? DEFAULT_SYNC_PERIOD_MS;
  if (syncPeriodMs < MIN_SYNC_PERIOD_MS) {
    log.info('--iptables-sync-period raised to its minimum', { requestedMs: syncPeriodMs, usedMs: MIN_SYNC_PERIOD_MS });
    syncPeriodMs = MIN_SYNC_PERIOD_MS;
  }
  const manager = new IptablesManager({
    nodes: cluster.nodes,
    config: cluster.config,
    master: {
      secure: { host: opts.bindAddress, port: master.address('secure').port },
      insecure: { host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress), port: master.address('insecure').port },
    },
    syncPeriodMs,
    logger: log,
    metricsRegistry: opts.metricsRegistry,
  });
  try {
    await manager.start();
    return manager;
  } catch (err: unknown) {
    if (!(err instanceof IptablesError)) throw err;
    log.error(`iptables manager not started: ${err.message}; the tunnel serves on, but this host's connections to nodes are not redirected to it`, {
      code: err.code,
    });
    return undefined;
  }
}

interface ServerSettings {
  localhostProxyPorts: ReadonlySet<number>;
  mappings: ReadonlyMap<number, 'secure' | 'insecure'>;
}

/** The current port settings, recomputed only when the server ConfigMap changes. */
function serverSettings(opts: ServerOptions, cluster: ClusterServices | undefined): () => ServerSettings {
  const of = (config: ServerConfig): ServerSettings => ({ localhostProxyPorts: config.localhostProxyPorts, mappings: masterPortMappings(config) });
  let settings = of(cluster?.config.current() ?? defaultServerConfig({ insecurePort: opts.insecurePort, localhostProxyPorts: opts.localhostProxyPorts }));
  cluster?.config.subscribe((config) => {
    settings = of(config);
  });
  return () => settings;
}

export class TunnelServer {
  private stopping: Promise<void> | undefined;
  /** Every listener is up (readiness). */
  private listening = false;
  /** shutdown() began: no new clients or agents. */
  private shuttingDown = false;
  /** The iptables manager, when it runs (cluster mode, --enable-iptables, and it could start). */
  iptables: IptablesManager | undefined;
  /** Cluster mode's DNS record controller (--enable-dns-controller). */
  private dns: import('../dns/controller.js').DnsController | undefined;

  private constructor(
    readonly serverID: string,
    readonly tunnel: Tunnel,
    readonly agentEndpoint: AgentEndpoint,
    readonly proxier: HttpConnectServer,
    /** The egress selector's frontend, when enabled. */
    readonly egress: EgressFrontend | undefined,
    readonly master: MasterServer,
    /** Absent when metaPort is undefined. */
    readonly meta: MetaServer | undefined,
    private readonly connector: KubeletConnector,
    private readonly log: Logger,
    /** Set in cluster mode. */
    readonly cluster: ClusterServices | undefined,
    private readonly afterFlood: GarbageAfterFlood,
  ) {}

  static async start(opts: ServerOptions): Promise<TunnelServer> {
    const log = opts.logger;
    const source = serverKubeConfigSource(opts.kubeConfig);
    // Everything that can be wrong with the flags' files is found before anything is built or listens.
    const files = await readServerFiles(opts);
    let cluster: ClusterServices | undefined;
    let certs: ServerCertificates;
    if (source === undefined) {
      certs = await localCertificates(opts);
    } else {
      // Loaded only in cluster mode: it brings @kubernetes/client-node (~75 MB of RSS).
      const { ClusterServices } = await import('./cluster.js');
      cluster = await ClusterServices.start({
        source,
        certDir: opts.certDir,
        certIPs: opts.certIPs,
        certDNSNames: opts.certDNSNames,
        insecurePort: opts.insecurePort,
        localhostProxyPorts: opts.localhostProxyPorts,
        logger: log,
        csrPollMs: opts.csrPollMs,
      });
      try {
        certs = await clusterCertificates(cluster, opts);
      } catch (err: unknown) {
        await cluster.stop();
        throw err;
      }
    }

    const serverID = opts.serverID ?? randomUUID();
    const registry = opts.metricsRegistry ?? new Registry();
    opts = { ...opts, metricsRegistry: registry };
    const tunnel = new Tunnel({
      strategies: opts.proxyStrategies,
      dialTimeoutMs: opts.dialTimeoutMs,
      stalledConnectionTimeoutMs: opts.stalledConnectionTimeoutMs,
      lingerAfterEndMs: opts.halfClosedLingerMs,
      maxPendingDialsPerAgent: opts.maxPendingDialsPerAgent,
      maxUnknownPacketsPerAgent: opts.maxUnknownPacketsPerAgent,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    let server: TunnelServer;
    try {
      server = TunnelServer.build(serverID, tunnel, certs, files, opts, cluster);
    } catch (err: unknown) {
      // A component refused its options: nothing listens yet, but the tunnel's timers run.
      await tunnel.close();
      await cluster?.stop();
      throw err;
    }
    const { agentEndpoint, proxier, egress, master, meta } = server;
    try {
      await agentEndpoint.start();
      await proxier.start();
      await egress?.start();
      await master.start();
      server.listening = true;
      if (cluster !== undefined && opts.enableDNSController) await server.startDnsController(cluster, opts);
      server.afterFlood.start();
      await meta?.start();
      if (cluster !== undefined && opts.enableIptables) server.iptables = await startIptables(cluster, master, opts);
    } catch (err: unknown) {
      await server.stop();
      throw err;
    }
    log.info('yurt-tunnel-server started', {
      serverID,
      mode: cluster === undefined ? 'local' : 'cluster',
      agentAddress: `${opts.bindAddress}:${agentEndpoint.address.port}`,
      proxier: opts.interceptorProxierUDS,
      egressSelector: opts.egressSelector === undefined ? 'off' : `${opts.egressSelector.mode} on ${opts.egressSelector.uds}`,
      securePort: master.address('secure').port,
      insecurePort: master.address('insecure').port,
      metaPort: meta?.address.port ?? 'off',
      strategies: opts.proxyStrategies.join(','),
    });
    return server;
  }

  /** Builds every component on the tunnel; listens on nothing. Throws if an option is refused. */
  private static build(
    serverID: string,
    tunnel: Tunnel,
    certs: ServerCertificates,
    files: ServerFiles,
    opts: ServerOptions,
    cluster: ClusterServices | undefined,
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
      maxConnectRate: opts.maxAgentConnectRate,
      tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });

    let kubeletTLS = { ...(files.proxyClient ?? certs.proxyClient), kubeletCA: files.kubeletCA };
    // The master ports dial the tunnel in this process: a failure of the
    // tunnelled connection reaches them as an error, not as a Unix socket's EOF.
    const connector = new KubeletConnector({
      dial: (address, o) => tunnel.dial(address, o),
      tls: () => kubeletTLS,
      logger: log,
    });
    const agents = new AgentNodeResolver(tunnel.registry);
    const resolver = cluster === undefined ? agents : new NodeResolverChain([cluster.resolver, agents]);
    // A failed dial names the node of its address, when one node has it.
    const nodeNameOf = (host: string): string | undefined => {
      const nodes = resolver.nodesByIP(host);
      return nodes.length === 1 ? nodes[0]!.name : resolver.node(host)?.name;
    };
    const common = { nodeNameOf, headTimeoutMs: opts.connectHeadTimeoutMs, logger: log, metricsRegistry: opts.metricsRegistry };
    const proxier = new HttpConnectServer(tunnel, { path: opts.interceptorProxierUDS, name: 'proxier', ...common });
    const e = opts.egressSelector;
    const egress =
      e === undefined
        ? undefined
        : e.mode === 'grpc'
          ? new GrpcProxyServer(tunnel, { path: e.uds, ...common })
          : new HttpConnectServer(tunnel, { path: e.uds, name: 'egress', ...common });
    // The port settings: the flags, or in cluster mode the server ConfigMap, followed live.
    const settings = serverSettings(opts, cluster);
    const master = new MasterServer({
      secure: { host: opts.bindAddress, port: opts.securePort, cert: certs.server.cert, key: certs.server.key, clientCA: files.clientCA ?? certs.ca },
      insecure: { host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress), port: opts.insecurePort },
      middleware: [
        traceRequest(resolver, log),
        localhostProxy(() => settings().localhostProxyPorts, resolver),
        masterPortTLS(() => settings().mappings),
      ],
      interceptor: new RequestInterceptor(connector, log, { nodeNameOf }),
      tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs,
      requestHeadTimeoutMs: opts.requestHeadTimeoutMs,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    if (cluster !== undefined) {
      // Rotated certificates go into the listeners and the connector in place: new handshakes use them, open connections stay.
      const clientCA = files.clientCA ?? certs.ca;
      cluster.serving.onRotated((pair) => {
        agentEndpoint.setTLS({ cert: pair.cert, key: pair.key, ca: certs.ca });
        master.setTLS({ cert: pair.cert, key: pair.key, clientCA });
      });
      if (files.proxyClient === undefined) {
        cluster.proxyClient.onRotated((pair) => {
          kubeletTLS = { ...pair, kubeletCA: files.kubeletCA };
        });
      }
    }
    // The checks read the server once it exists.
    let server: TunnelServer | undefined;
    const meta: MetaServer | undefined =
      opts.metaPort === undefined
        ? undefined
        : new MetaServer({
            host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress),
            port: opts.metaPort,
            registry: opts.metricsRegistry!,
            readyChecks: {
              listeners: () => (server?.listening === true ? undefined : 'not listening yet'),
              certificates: () =>
                cluster === undefined || (cluster.serving.current() !== undefined && cluster.proxyClient.current() !== undefined)
                  ? undefined
                  : 'waiting for the serving and proxy-client certificates',
              shutdown: () => (server?.shuttingDown !== true && server?.stopping === undefined ? undefined : 'shutting down'),
            },
            debug: {
              '/debug/agents': () => agentStatuses(tunnel.registry, serverID),
              '/debug/connections': (q) => connectionStatuses(tunnel.registry, q.get('agent') ?? undefined),
            },
            raw: opts.enableProfiling === true ? PROFILING_ROUTES : {},
            logger: log,
          });
    // After a flood of connections, their memory goes back at once instead of when V8 next needs room.
    const afterFlood = new GarbageAfterFlood({
      openConnections: () => master.connectionCount + agentEndpoint.connectionCount + proxier.connectionCount + (egress?.connectionCount ?? 0),
      logger: log,
    });
    server = new TunnelServer(serverID, tunnel, agentEndpoint, proxier, egress, master, meta, connector, log, cluster, afterFlood);
    return server;
  }

  /** The `dnat-*` ports it keeps point at the master ports as they listen. */
  private async startDnsController(cluster: ClusterServices, opts: ServerOptions): Promise<void> {
    // Loaded here, as the cluster services are: a server without a cluster never loads the Kubernetes client.
    const { DnsController, MIN_DNS_SYNC_PERIOD_MS } = await import('../dns/controller.js');
    if (opts.dnsSyncPeriodMs !== undefined && opts.dnsSyncPeriodMs < MIN_DNS_SYNC_PERIOD_MS) {
      this.log.warn(`--dns-sync-period ${opts.dnsSyncPeriodMs / 1000}s raised to the minimum ${MIN_DNS_SYNC_PERIOD_MS / 1000}s`);
    }
    this.dns = new DnsController({
      client: cluster.client,
      nodes: cluster.nodes,
      services: cluster.services,
      proxyPorts: cluster.config,
      masterPorts: { secure: this.master.address('secure').port, insecure: this.master.address('insecure').port },
      ...(opts.dnsSyncPeriodMs !== undefined ? { syncPeriodMs: opts.dnsSyncPeriodMs } : {}),
      logger: this.log,
    });
    this.dns.start();
  }

  /**
   * Graceful shutdown (SIGTERM): takes no new clients or agents at once,
   * lets open connections and pending dials finish for up to `graceMs`, then
   * stops. The meta server answers until the end (readyz fails meanwhile).
   */
  async shutdown(graceMs: number): Promise<void> {
    if (this.shuttingDown || this.stopping !== undefined) return this.stop();
    this.shuttingDown = true;
    this.agentEndpoint.stopAccepting();
    this.proxier.stopAccepting();
    this.egress?.stopAccepting();
    this.master.stopAccepting();
    const open = (): number => this.tunnel.establishedCount() + this.tunnel.pendingDialCount;
    this.log.info('shutting down: no new clients or agents; waiting for open connections', { connections: open(), graceMs });
    if (await this.tunnel.whenIdle(graceMs)) this.log.info('every connection finished');
    else this.log.warn('graceful shutdown timeout passed; closing the connections still open', { connections: open() });
    await this.stop();
  }

  /** Stops accepting, fails pending dials, closes every connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      // The rules go first: connections to the nodes stop coming here before the master ports close.
      await this.iptables?.stop();
      this.afterFlood.stop();
      await this.meta?.close();
      await this.master.close();
      this.connector.destroy();
      await this.proxier.close();
      await this.egress?.close();
      await this.tunnel.close();
      await this.agentEndpoint.close();
      await this.dns?.stop();
      await this.cluster?.stop();
      this.log.info('yurt-tunnel-server stopped', { serverID: this.serverID });
    })();
    return this.stopping;
  }
}
