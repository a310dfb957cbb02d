// The parts of a yurt-tunnel-server, each built from the options on the
// tunnel core: the agent endpoint, the frontends (the proxier and the egress
// selector's socket), the master ports with their kubelet connector, the meta
// server, and the iptables manager. Nothing here listens; app.ts starts them.

import { AgentEndpoint } from '../endpoint/agent-endpoint.js';
import type { NodeNameOf } from '../frontend/dial-reason.js';
import { DirectDialer } from '../frontend/direct-dial.js';
import type { LoopGuard } from '../frontend/loop-guard.js';
import { GrpcProxyServer } from '../frontend/grpc-proxy.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import type { TcpPortMap } from '../frontend/tcp-port-map.js';
import { HttpProxy } from '../interceptor/http-proxy.js';
import { KubeletConnector } from '../interceptor/kubelet-connector.js';
import { MasterServer } from '../interceptor/master-server.js';
import { localhostProxy } from '../interceptor/middleware/localhost-proxy.js';
import { masterPortTLS } from '../interceptor/middleware/master-port-tls.js';
import { traceRequest } from '../interceptor/middleware/trace-request.js';
import { RequestInterceptor } from '../interceptor/request-interceptor.js';
import type { IptablesManager } from '../iptables/manager.js';
import { defaultServerConfig, masterPortMappings, type ServerConfig } from '../kube/server-config.js';
import { MetaServer, type ReadyCheck } from '../meta/meta-server.js';
import { watchCertificateExpiry } from '../metrics/certificate-expiry.js';
import { watchProcess } from '../metrics/process-metrics.js';
import { watchPendingDialsPerAgent } from '../tunnel/pending-dial-metrics.js';
import { DEFAULT_MAX_PENDING_DIALS_PER_AGENT } from '../tunnel/options.js';
import { PROFILING_ROUTES } from '../meta/profiling.js';
import { NodeResolverChain, type EdgeNodeTest, type NodeResolver } from '../nodes/node-resolver.js';
import { agentStatuses, connectionStatuses } from '../tunnel/debug.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { AgentNodeResolver } from './agent-node-resolver.js';
import type { ClusterServices } from './cluster.js';
import { loopbackFor, type ServerOptions } from './options.js';
import type { ServerCertificates, ServerFiles } from './startup.js';

/** A frontend kube-apiserver's egress selector dials: HTTP CONNECT or ProxyService over a Unix socket. */
export interface EgressFrontend {
  readonly connectionCount: number;
  start(): Promise<void>;
  /** Why its socket path no longer reaches it (readiness), or undefined. */
  socketProblem(): string | undefined;
  stopAccepting(): void;
  close(): Promise<void>;
}

export function agentEndpointFor(tunnel: Tunnel, serverID: string, certs: ServerCertificates, opts: ServerOptions): AgentEndpoint {
  return new AgentEndpoint(tunnel, {
    host: opts.bindAddress,
    port: opts.tunnelAgentConnectPort,
    tls: { cert: certs.server.cert, key: certs.server.key, ca: certs.ca },
    serverID,
    serverCount: opts.serverCount,
    keepaliveTimeMs: opts.keepaliveTimeMs,
    keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
    identityCheck: opts.agentIdentityCheck,
    forwardedClientCertHeader: opts.forwardedClientCertHeader,
    trustedProxyCIDRs: opts.trustedProxyCIDRs,
    maxStreamsPerAgent: opts.maxAgentStreams,
    resumeWindowMs: opts.resumeWindowMs,
    maxConnectRate: opts.maxAgentConnectRate,
    tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs,
    logger: opts.logger,
    metricsRegistry: opts.metricsRegistry,
  });
}

/** Who knows the nodes: the connected agents, and in cluster mode the informers first. */
export function nodeResolverFor(tunnel: Tunnel, cluster: ClusterServices | undefined): NodeResolver {
  const agents = new AgentNodeResolver(tunnel.registry);
  return cluster === undefined ? agents : new NodeResolverChain([cluster.resolver, agents]);
}

/** The node an address belongs to, when one node has it: a failed dial names it. */
export function nodeNamer(resolver: NodeResolver): NodeNameOf {
  return (host) => {
    const nodes = resolver.nodesByIP(host);
    return nodes.length === 1 ? nodes[0]!.name : resolver.node(host)?.name;
  };
}

/**
 * The proxier (HTTP CONNECT on its Unix socket) and, when enabled, the egress
 * selector's socket. Only the egress socket dials directly what the tunnel
 * does not reach (--egress-direct-dial), and only when `isEdgeNode` is known
 * (cluster mode).
 */
export function frontendsFor(
  tunnel: Tunnel,
  nodeNameOf: NodeNameOf,
  opts: ServerOptions,
  isEdgeNode: EdgeNodeTest | undefined,
): { proxier: HttpConnectServer; egress: EgressFrontend | undefined; direct: DirectDialer | undefined } {
  const common = { nodeNameOf, headTimeoutMs: opts.connectHeadTimeoutMs, logger: opts.logger, metricsRegistry: opts.metricsRegistry };
  const proxier = new HttpConnectServer(tunnel, { path: opts.interceptorProxierUDS, flag: '--interceptor-proxier-uds', name: 'proxier', ...common });
  const e = opts.egressSelector;
  if (e === undefined) return { proxier, egress: undefined, direct: undefined };
  const direct =
    (e.directDial ?? 'auto') === 'auto' && isEdgeNode !== undefined
      ? new DirectDialer(tunnel, { isEdgeNode, timeoutMs: opts.dialTimeoutMs, logger: opts.logger, metricsRegistry: opts.metricsRegistry })
      : undefined;
  const egress =
    e.mode === 'grpc'
      ? new GrpcProxyServer(tunnel, { path: e.uds, flag: '--egress-selector-uds', direct, ...common })
      : new HttpConnectServer(tunnel, { path: e.uds, flag: '--egress-selector-uds', name: 'egress', direct, ...common });
  return { proxier, egress, direct };
}

/**
 * The master ports' way to kubelets. They dial the tunnel in this process: a
 * failure of the tunnelled connection reaches them as an error, not as a Unix
 * socket's EOF. In cluster mode a rotated proxy-client certificate is used
 * from the next connection on (unless --proxy-client-cert-file pins one).
 */
export function kubeletConnectorFor(
  tunnel: Tunnel,
  certs: ServerCertificates,
  files: ServerFiles,
  cluster: ClusterServices | undefined,
  opts: ServerOptions,
): KubeletConnector {
  let kubeletTLS = { ...(files.proxyClient ?? certs.proxyClient), kubeletCA: files.kubeletCA };
  if (cluster !== undefined && files.proxyClient === undefined) {
    cluster.proxyClient.onRotated((pair) => {
      kubeletTLS = { ...pair, kubeletCA: files.kubeletCA };
    });
  }
  return new KubeletConnector({ dial: (address, o) => tunnel.dial(address, o), tls: () => kubeletTLS, logger: opts.logger });
}

export interface MasterParts {
  loopGuard: LoopGuard;
  certs: ServerCertificates;
  files: ServerFiles;
  cluster: ClusterServices | undefined;
  resolver: NodeResolver;
  nodeNameOf: NodeNameOf;
  connector: KubeletConnector;
}

/** The secure and insecure master ports (and the HTTP proxy port, when on), their middleware and the request interceptor. */
export function masterFor(opts: ServerOptions, p: MasterParts): MasterServer {
  const log = opts.logger;
  // The port settings: the flags, or in cluster mode the server ConfigMap, followed live.
  const settings = serverSettings(opts, p.cluster);
  const interceptor = new RequestInterceptor(p.connector, log, { nodeNameOf: p.nodeNameOf, loopGuard: p.loopGuard });
  const tls = { cert: p.certs.server.cert, key: p.certs.server.key, clientCA: p.files.clientCA ?? p.certs.ca };
  const proxy =
    opts.httpProxyPort === undefined
      ? undefined
      : new HttpProxy({
          resolver: p.resolver,
          allowedPorts: () => settings().httpProxyAllowedPorts,
          localhostPorts: () => settings().localhostProxyPorts,
          interceptor,
          connector: p.connector,
          nodeNameOf: p.nodeNameOf,
          loopGuard: p.loopGuard,
          logger: log,
          metricsRegistry: opts.metricsRegistry,
        });
  return new MasterServer({
    secure: { host: opts.bindAddress, port: opts.securePort, ...tls },
    insecure: { host: opts.insecureBindAddress ?? loopbackFor(opts.bindAddress), port: opts.insecurePort },
    ...(proxy === undefined ? {} : { proxy: { host: opts.bindAddress, port: opts.httpProxyPort!, ...tls, handler: proxy } }),
    middleware: [traceRequest(p.resolver, log), localhostProxy(() => settings().localhostProxyPorts, p.resolver), masterPortTLS(() => settings().mappings)],
    interceptor,
    loopGuard: p.loopGuard,
    tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs,
    requestHeadTimeoutMs: opts.requestHeadTimeoutMs,
    logger: log,
    metricsRegistry: opts.metricsRegistry,
  });
}

/** The TCP listeners a tunnel dial must never reach (frontend/loop-guard.ts); their Unix sockets no agent can dial. */
export function watchOwnListeners(
  guard: LoopGuard,
  p: { agentEndpoint: AgentEndpoint; master: MasterServer; meta: MetaServer | undefined; tcpPorts: TcpPortMap | undefined },
): void {
  // Read at every check: a server's address() is null until it listens.
  guard.listeners.add('agent port', () => p.agentEndpoint.address);
  guard.listeners.add('secure master port', () => p.master.address('secure'));
  guard.listeners.add('insecure master port', () => p.master.address('insecure'));
  if (p.master.has('proxy')) guard.listeners.add('HTTP proxy port', () => p.master.address('proxy'));
  const tcpPorts = p.tcpPorts;
  if (tcpPorts !== undefined) guard.listeners.addEach('mapped TCP port', () => tcpPorts.addresses());
  const meta = p.meta;
  if (meta !== undefined) guard.listeners.add('meta port', () => meta.address);
}

/** Rotated serving certificates go into the listeners in place: new handshakes use them, open connections stay. */
export function followServingRotations(
  cluster: ClusterServices,
  certs: ServerCertificates,
  files: ServerFiles,
  endpoint: AgentEndpoint,
  master: MasterServer,
): void {
  const clientCA = files.clientCA ?? certs.ca;
  cluster.serving.onRotated((pair) => {
    endpoint.setTLS({ cert: pair.cert, key: pair.key, ca: certs.ca });
    master.setTLS({ cert: pair.cert, key: pair.key, clientCA });
  });
}

/**
 * What the monitoring pack reads besides the tunnel's own metrics: the process's CPU and memory, the notAfter of the
 * certificates it presents now (rotated or pinned by flags), and the fullest agent's pending dials against the limit.
 */
export function watchServerProcess(
  tunnel: Tunnel,
  certs: ServerCertificates,
  files: ServerFiles,
  cluster: ClusterServices | undefined,
  opts: ServerOptions,
): void {
  const registry = opts.metricsRegistry!;
  watchProcess(registry);
  watchPendingDialsPerAgent(registry, tunnel.registry, opts.maxPendingDialsPerAgent ?? DEFAULT_MAX_PENDING_DIALS_PER_AGENT);
  watchCertificateExpiry(registry, {
    serving: () => cluster?.serving.current()?.cert ?? certs.server.cert,
    proxy_client: () => files.proxyClient?.cert ?? cluster?.proxyClient.current()?.cert ?? certs.proxyClient.cert,
  });
}

/** The meta server (/healthz, /readyz, /metrics, /debug/*), when --meta-port is given. */
export function metaFor(
  tunnel: Tunnel,
  serverID: string,
  cluster: ClusterServices | undefined,
  readiness: { listeners: ReadyCheck; shutdown: ReadyCheck },
  opts: ServerOptions,
): MetaServer | undefined {
  if (opts.metaPort === undefined) return undefined;
  return new MetaServer({
    host: opts.metaBindAddress ?? opts.insecureBindAddress ?? loopbackFor(opts.bindAddress),
    port: opts.metaPort,
    headTimeoutMs: opts.requestHeadTimeoutMs,
    registry: opts.metricsRegistry!,
    readyChecks: {
      listeners: readiness.listeners,
      certificates: () =>
        cluster === undefined || (cluster.serving.current() !== undefined && cluster.proxyClient.current() !== undefined)
          ? undefined
          : 'waiting for the serving and proxy-client certificates',
      shutdown: readiness.shutdown,
    },
    debug: {
      '/debug/agents': () => agentStatuses(tunnel.registry, serverID),
      '/debug/connections': (q) => connectionStatuses(tunnel.registry, q.get('agent') ?? undefined),
    },
    raw: opts.enableProfiling === true ? PROFILING_ROUTES : {},
    logger: opts.logger,
  });
}

/**
 * The iptables manager on the master ports' bound addresses. A manager that
 * cannot start (no iptables, no NET_ADMIN) is one error in the log; the
 * server serves on without it.
 */
export async function startIptables(cluster: ClusterServices, master: MasterServer, opts: ServerOptions): Promise<IptablesManager | undefined> {
  const log = opts.logger;
  // Loaded here, as the cluster services are: a server in local mode never loads the iptables room.
  const { DEFAULT_SYNC_PERIOD_MS, IptablesManager, MIN_SYNC_PERIOD_MS } = await import('../iptables/manager.js');
  const { IptablesError } = await import('../iptables/errors.js');
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
  httpProxyAllowedPorts: ReadonlySet<number>;
  mappings: ReadonlyMap<number, 'secure' | 'insecure'>;
}

/** The current port settings, recomputed only when the server ConfigMap changes. */
function serverSettings(opts: ServerOptions, cluster: ClusterServices | undefined): () => ServerSettings {
  const of = (config: ServerConfig): ServerSettings => ({
    localhostProxyPorts: config.localhostProxyPorts,
    httpProxyAllowedPorts: config.httpProxyAllowedPorts,
    mappings: masterPortMappings(config),
  });
  let settings = of(
    cluster?.config.current() ??
      defaultServerConfig({
        insecurePort: opts.insecurePort,
        localhostProxyPorts: opts.localhostProxyPorts,
        httpProxyAllowedPorts: opts.httpProxyAllowedPorts,
      }),
  );
  cluster?.config.subscribe((config) => {
    settings = of(config);
  });
  return () => settings;
}
