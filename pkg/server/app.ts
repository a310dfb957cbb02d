// yurt-tunnel-server's run sequence: certificates, the tunnel core, the agent
// endpoint and the CONNECT proxier, in that order; stop() undoes all of it.
// The parts are built in components.ts; the options are options.ts's.

import { randomUUID } from 'node:crypto';
import { Registry } from '../metrics/prom.js';
import type { AgentEndpoint } from '../endpoint/agent-endpoint.js';
import type { DirectDialer } from '../frontend/direct-dial.js';
import type { HttpConnectServer } from '../frontend/http-connect.js';
import { TcpPortMap } from '../frontend/tcp-port-map.js';
import type { KubeletConnector } from '../interceptor/kubelet-connector.js';
import type { MasterServer } from '../interceptor/master-server.js';
import type { IptablesManager } from '../iptables/manager.js';
import { serverKubeConfigSource } from '../kube/config-source.js';
import type { Logger } from '../log/logger.js';
import { GarbageAfterFlood } from '../meta/garbage-after-flood.js';
import { LoopGuard } from '../frontend/loop-guard.js';
import { OwnListeners } from '../net/own-listeners.js';
import type { MetaServer } from '../meta/meta-server.js';
import { Tunnel } from '../tunnel/tunnel.js';
import type { ClusterServices } from './cluster.js';
import {
  agentEndpointFor,
  followServingRotations,
  frontendsFor,
  kubeletConnectorFor,
  masterFor,
  metaFor,
  nodeNamer,
  nodeResolverFor,
  startIptables,
  watchOwnListeners,
  watchServerProcess,
  type EgressFrontend,
} from './components.js';
import { loopbackFor, type ServerLeaseSettings, type ServerOptions } from './options.js';
import { clusterCertificates, localCertificates, readServerFiles, type ServerCertificates, type ServerFiles } from './startup.js';
import { DEFAULT_RESUME_WINDOW_MS } from '../protocol/resume.js';

/**
 * The server's certificates: from the flags' files (local mode), or from the
 * cluster, whose services start here and are returned to be stopped with the server.
 */
async function serverCertificates(opts: ServerOptions): Promise<{ certs: ServerCertificates; cluster: ClusterServices | undefined }> {
  const source = serverKubeConfigSource(opts.kubeConfig);
  if (source === undefined) return { certs: await localCertificates(opts), cluster: undefined };
  // Loaded only in cluster mode: it brings @kubernetes/client-node (~75 MB of RSS).
  const { ClusterServices } = await import('./cluster.js');
  const cluster = await ClusterServices.start({
    source,
    certDir: opts.certDir,
    certIPs: opts.certIPs,
    certDNSNames: opts.certDNSNames,
    insecurePort: opts.insecurePort,
    localhostProxyPorts: opts.localhostProxyPorts,
    ...(opts.httpProxyAllowedPorts !== undefined ? { httpProxyAllowedPorts: opts.httpProxyAllowedPorts } : {}),
    logger: opts.logger,
    csrPollMs: opts.csrPollMs,
    ...(opts.enableCSRApprover !== false ? { csrApprover: { serverServiceAccount: opts.serverServiceAccount } } : {}),
  });
  try {
    return { certs: await clusterCertificates(cluster, opts), cluster };
  } catch (err: unknown) {
    await cluster.stop();
    throw err;
  }
}

export class TunnelServer {
  private stopping: Promise<void> | undefined;
  /** Every listener is up (readiness). */
  private listening = false;
  /** shutdown() began: no new clients or agents. */
  private shuttingDown = false;
  /** The iptables manager, when it runs (cluster mode, --enable-iptables, and it could start). */
  iptables: IptablesManager | undefined;
  /** Cluster mode's ports mapped to nodes' addresses (the server ConfigMap's tcp-proxy-ports). */
  tcpPorts: TcpPortMap | undefined;
  /** Cluster mode's DNS record controller (--enable-dns-controller). */
  private dns: import('../dns/controller.js').DnsController | undefined;
  /** Konnectivity's server Lease (--enable-lease-controller). */
  private lease: import('../kube/server-lease.js').ServerLease | undefined;

  private constructor(
    readonly serverID: string,
    readonly tunnel: Tunnel,
    readonly agentEndpoint: AgentEndpoint,
    readonly proxier: HttpConnectServer,
    /** The egress selector's frontend, when enabled. */
    readonly egress: EgressFrontend | undefined,
    /** The egress frontend's direct dials (--egress-direct-dial), when on. */
    private readonly direct: DirectDialer | undefined,
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
    if (opts.leaseController !== undefined && serverKubeConfigSource(opts.kubeConfig) === undefined) {
      throw new TypeError('--enable-lease-controller needs a cluster: give --kube-config, or run in a pod (in-cluster configuration)');
    }
    // Everything that can be wrong with the flags' files is found before anything is built or listens.
    const files = await readServerFiles(opts);
    const { certs, cluster } = await serverCertificates(opts);
    const serverID = opts.serverID ?? randomUUID();
    const registry = opts.metricsRegistry ?? new Registry();
    opts = { ...opts, metricsRegistry: registry };
    // A dial to one of this server's own listeners would loop through the tunnel: refused.
    const loopGuard = new LoopGuard(new OwnListeners(), registry);
    const tunnel = new Tunnel({
      loopCheck: (address, agent) => loopGuard.dialRefusal(address, agent),
      strategies: opts.proxyStrategies,
      dialTimeoutMs: opts.dialTimeoutMs,
      stalledConnectionTimeoutMs: opts.stalledConnectionTimeoutMs,
      lingerAfterEndMs: opts.halfClosedLingerMs,
      maxPendingDialsPerAgent: opts.maxPendingDialsPerAgent,
      maxUnknownPacketsPerAgent: opts.maxUnknownPacketsPerAgent,
      resumeMemoryBudget: opts.resumeMemoryBudget,
      logger: log,
      metricsRegistry: opts.metricsRegistry,
    });
    watchServerProcess(tunnel, certs, files, cluster, opts);
    let server: TunnelServer;
    try {
      server = TunnelServer.build(serverID, tunnel, loopGuard, certs, files, opts, cluster);
    } catch (err: unknown) {
      // A component refused its options: nothing listens yet, but the tunnel's timers run.
      await tunnel.close();
      await cluster?.stop();
      throw err;
    }
    try {
      await server.serve(certs, opts, cluster);
    } catch (err: unknown) {
      await server.stop();
      throw err;
    }
    server.logStarted(serverID, opts, cluster);
    return server;
  }

  /** Rehearses the data path if asked, then starts every component in turn; the caller stops the server if one fails. */
  private async serve(certs: ServerCertificates, opts: ServerOptions, cluster: ClusterServices | undefined): Promise<void> {
    if (opts.startupRehearsal === true) {
      // Loaded only when asked for: a server without the rehearsal does not load its modules.
      const { runStartupRehearsal } = await import('../grpc/data-path-rehearsal.js');
      const { rehearseServer } = await import('./rehearsal.js');
      await runStartupRehearsal(
        this.log,
        (size) =>
          rehearseServer({
            ...size,
            strategies: opts.proxyStrategies,
            tls: { cert: certs.server.cert, key: certs.server.key },
            resumeWindowMs: opts.resumeWindowMs ?? DEFAULT_RESUME_WINDOW_MS,
          }),
        opts.rehearsalTiering,
      );
    }
    await this.agentEndpoint.start();
    await this.proxier.start();
    await this.egress?.start();
    await this.master.start();
    if (cluster !== undefined && this.tcpPorts !== undefined) {
      const ports = this.tcpPorts;
      cluster.config.subscribe((config) => void ports.apply(config.tcpProxyPorts));
      await ports.apply(cluster.config.current().tcpProxyPorts);
    }
    this.listening = true;
    if (cluster !== undefined && opts.enableDNSController) await this.startDnsController(cluster, opts);
    if (cluster !== undefined && opts.leaseController !== undefined) await this.startLease(cluster, opts.leaseController);
    this.afterFlood.start();
    await this.meta?.start();
    if (cluster !== undefined && opts.enableIptables) this.iptables = await startIptables(cluster, this.master, opts);
  }

  private logStarted(serverID: string, opts: ServerOptions, cluster: ClusterServices | undefined): void {
    this.log.info('yurt-tunnel-server started', {
      serverID,
      mode: cluster === undefined ? 'local' : 'cluster',
      agentAddress: `${opts.bindAddress}:${this.agentEndpoint.address.port}`,
      proxier: opts.interceptorProxierUDS,
      egressSelector: opts.egressSelector === undefined ? 'off' : `${opts.egressSelector.mode} on ${opts.egressSelector.uds}`,
      // Local mode has no Nodes to tell an edge node from a cloud host: its egress socket only tunnels.
      egressDirectDial:
        opts.egressSelector === undefined ? 'off' : (opts.egressSelector.directDial ?? 'auto') === 'auto' && cluster !== undefined ? 'on' : 'off',
      securePort: this.master.address('secure').port,
      insecurePort: this.master.address('insecure').port,
      httpProxyPort: this.master.has('proxy') ? this.master.address('proxy').port : 'off',
      metaPort: this.meta?.address.port ?? 'off',
      strategies: opts.proxyStrategies.join(','),
    });
  }

  /** Builds every component on the tunnel; listens on nothing. Throws if an option is refused. */
  private static build(
    serverID: string,
    tunnel: Tunnel,
    loopGuard: LoopGuard,
    certs: ServerCertificates,
    files: ServerFiles,
    opts: ServerOptions,
    cluster: ClusterServices | undefined,
  ): TunnelServer {
    const agentEndpoint = agentEndpointFor(tunnel, serverID, certs, opts);
    const resolver = nodeResolverFor(tunnel, cluster);
    const nodeNameOf = nodeNamer(resolver);
    const { proxier, egress, direct } = frontendsFor(tunnel, nodeNameOf, opts, cluster?.isEdgeNode);
    const connector = kubeletConnectorFor(tunnel, certs, files, cluster, opts);
    const master = masterFor(opts, { loopGuard, certs, files, cluster, resolver, nodeNameOf, connector });
    if (cluster !== undefined) followServingRotations(cluster, certs, files, agentEndpoint, master);
    // The checks read the server once it exists.
    let server: TunnelServer | undefined;
    const meta = metaFor(
      tunnel,
      serverID,
      cluster,
      {
        // A socket file removed or taken over since: callers no longer reach this server through it.
        listeners: () => (server?.listening === true ? (server.proxier.socketProblem() ?? server.egress?.socketProblem()) : 'not listening yet'),
        shutdown: () => (server?.shuttingDown !== true && server?.stopping === undefined ? undefined : 'shutting down'),
      },
      opts,
    );
    const tcpPorts =
      cluster === undefined
        ? undefined
        : new TcpPortMap(tunnel, {
            defaultHost: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress),
            logger: opts.logger,
            metricsRegistry: opts.metricsRegistry,
          });
    watchOwnListeners(loopGuard, { agentEndpoint, master, meta, tcpPorts });
    // After a flood of connections, their memory goes back at once instead of when V8 next needs room.
    const afterFlood = new GarbageAfterFlood({
      openConnections: () =>
        master.connectionCount + agentEndpoint.connectionCount + proxier.connectionCount + (egress?.connectionCount ?? 0) + (tcpPorts?.connectionCount ?? 0),
      logger: opts.logger,
    });
    server = new TunnelServer(serverID, tunnel, agentEndpoint, proxier, egress, direct, master, meta, connector, opts.logger, cluster, afterFlood);
    server.tcpPorts = tcpPorts;
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

  /** Published once the agent port listens: an agent that counts this server can reach it. */
  private async startLease(cluster: ClusterServices, settings: ServerLeaseSettings): Promise<void> {
    const { ServerLease } = await import('../kube/server-lease.js');
    this.lease = new ServerLease({
      client: cluster.client,
      serverID: this.serverID,
      namespace: settings.namespace,
      labels: settings.labels,
      leaseDurationMs: settings.durationMs,
      renewIntervalMs: settings.renewIntervalMs,
      gcIntervalMs: settings.gcIntervalMs,
      logger: this.log,
    });
    this.lease.start();
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
    await this.tcpPorts?.stopAccepting();
    const open = (): number => this.tunnel.establishedCount() + this.tunnel.pendingDialCount + (this.direct?.openCount ?? 0);
    this.log.info('shutting down: no new clients or agents; waiting for open connections', { connections: open(), graceMs });
    const deadline = performance.now() + graceMs;
    const idle =
      (await this.tunnel.whenIdle(graceMs)) && (this.direct === undefined || (await this.direct.whenIdle(Math.max(0, deadline - performance.now()))));
    if (idle) this.log.info('every connection finished');
    else this.log.warn('graceful shutdown timeout passed; closing the connections still open', { connections: open() });
    await this.stop();
  }

  /** Stops accepting, fails pending dials, closes every connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      // Agents counting Leases learn at once that this server is going.
      await this.lease?.stop();
      // The rules go first: connections to the nodes stop coming here before the master ports close.
      await this.iptables?.stop();
      this.afterFlood.stop();
      await this.meta?.close();
      await this.master.close();
      await this.tcpPorts?.close();
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
