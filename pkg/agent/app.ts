// yurt-tunnel-agent's run sequence: read the certificates, build the dial
// policy and identifiers, keep links to the servers; drain on shutdown.

import type { AgentTransport } from './transport.js';
import { join } from 'node:path';
import type { CertificateManager } from '../certs/certificate-manager.js';
import { readCertKeyPair, readPemFile } from '../certs/read-pem.js';
import type { KubeConfigSource } from '../kube/config-source.js';
import type { ServerLeaseCounter } from '../kube/server-lease-counter.js';
import { TUNNEL_NAMESPACE, TUNNEL_SERVICE } from '../kube/tunnel-addresses.js';
import { MetaServer } from '../meta/meta-server.js';
import { PROFILING_ROUTES } from '../meta/profiling.js';
import { AgentMetrics } from './metrics.js';
import { watchCertificateExpiry } from '../metrics/certificate-expiry.js';
import { watchProcess } from '../metrics/process-metrics.js';
import type { AgentTLS } from './server-connection.js';
import { isIP } from 'node:net';
import type { Logger } from '../log/logger.js';
import { formatAgentIdentifiers, IDENTIFIER_KEYS, emptyIdentifiers } from '../protocol/identifiers.js';
import { AllowList } from './allow-list.js';
import { DEFAULT_RESUME_WINDOW_MS } from '../protocol/resume.js';
import { ClientSet } from './client-set.js';
import { parseServerAddresses } from './server-addresses.js';
import { DialLimit } from './dial-limit.js';
import { Dialer } from './dialer.js';
import { runningNodeOptions } from './node-options.js';
import type { RehearsalTiering } from '../grpc/data-path-rehearsal.js';
import { proxyConfigFrom, type ProxyConfig, type ProxySettings } from './proxy/proxy-config.js';

export interface AgentOptions {
  nodeName: string;
  nodeIP?: string;
  /**
   * host:port of the server's agent port, or a comma list of servers' (no load balancer);
   * '' with a cluster: found from Service kube-system/x-tunnel-server-svc.
   */
  tunnelServerAddr: string;
  /** CA of the server's certificate; default the cluster's CA in cluster mode, else `<certDir>/ca.crt`. */
  caFile?: string;
  /** Client certificate and key files; without them, a kubeconfig source means a certificate from the cluster. */
  certFile?: string;
  keyFile?: string;
  /** Where files live: `ca.crt`, `tls.crt`, `tls.key` in file mode, the CSR-issued certificate in cluster mode. */
  certDir?: string;
  /** Cluster mode: how the agent reaches the API server to request its certificate. */
  kubeSource?: KubeConfigSource;
  /** Cluster mode: how often a pending CSR is read (default 1 s). */
  csrPollMs?: number;
  /** URL-query identifiers; default `ipv4=<node-ip>&host=<node-name>`. */
  agentIdentifiers?: string;
  /** Comma list for the allow-list; default the node IPs and loopback. */
  allowedDestinations?: string;
  dialTimeoutMs: number;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** First reconnect delay (and first retry of the server's discovery). */
  syncIntervalMs: number;
  /** Longest reconnect delay (and longest between tries of the discovery). */
  syncIntervalCapMs: number;
  /** While holding servercount servers, dial this often anyway to find new replicas; 0 never. Default 30 s. */
  serverProbeIntervalMs?: number;
  /**
   * Count the servers from Konnectivity's server Leases (--count-server-leases,
   * --lease-namespace, --lease-label-selector, --server-count-source); needs a
   * cluster (kubeSource). Off when undefined.
   */
  serverLeases?: { namespace: string; labelSelector: string; source: 'default' | 'max' };
  /** How long a draining agent waits for its connections before exiting. */
  drainTimeoutMs: number;
  /** gRPC, a WebSocket, or auto (--transport). Default auto. */
  transport?: AgentTransport;
  /** Session resume's window (--resume-window); 0 turns it off. Default 10 s. */
  resumeWindowMs?: number;
  /** Dials the agent runs at once (all links together). Default 256. */
  maxConcurrentDials?: number;
  /** The meta server (/healthz, /readyz, /metrics, /debug/connections); off when metaPort is undefined. */
  metaHost?: string;
  metaPort?: number;
  /** Time a meta port caller has for its request head (no flag). Default 30 s, as the server's --request-head-timeout. */
  metaHeadTimeoutMs?: number;
  enableProfiling?: boolean;
  /** Rehearse the data path before dialling the server (pkg/grpc/data-path-rehearsal.ts); off unless the CLI is given --startup-rehearsal. */
  startupRehearsal?: boolean;
  /** What V8 is told around the rehearsal (the CLIs: cmd/common/v8-tiering.ts's rehearsalTiering). */
  rehearsalTiering?: RehearsalTiering;
  /** The proxy to the servers: --proxy-url, --proxy-credentials-file, --proxy-ca-file and the *_PROXY variables (proxy/proxy-config.ts). */
  proxy?: ProxySettings;
  logger: Logger;
}

/** Default identifiers, as OpenYurt: the node IP (v4 or v6) and the node name. */
export function defaultIdentifiers(nodeName: string, nodeIP: string | undefined): string {
  const ids = emptyIdentifiers();
  if (nodeIP !== undefined && isIP(nodeIP) === 6) ids.ipv6.push(nodeIP);
  else if (nodeIP !== undefined && isIP(nodeIP) === 4) ids.ipv4.push(nodeIP);
  ids.host.push(nodeName);
  return formatAgentIdentifiers(ids);
}

/** Rejects identifiers with unknown keys or empty values, as the upstream agent does at startup. */
export function checkIdentifiers(text: string): void {
  for (const [key, value] of new URLSearchParams(text)) {
    if (!(IDENTIFIER_KEYS as readonly string[]).includes(key)) {
      throw new TypeError(
        `--agent-identifiers has unknown key ${JSON.stringify(key)}; known keys: ${IDENTIFIER_KEYS.join(', ')} (e.g. ipv4=10.0.0.5&host=node1)`,
      );
    }
    if (value === '') throw new TypeError(`--agent-identifiers has an empty value for ${key}`);
  }
}

/** Who named a certificate file: its flag, or its flag's default in --cert-dir. */
function fileFlag(flag: string, given: string | undefined, certDir: string): string {
  return given !== undefined ? flag : `${flag} (default: in --cert-dir ${certDir})`;
}

export const DEFAULT_AGENT_CERT_DIR = '/var/lib/yurttunnel-agent/pki';

/**
 * The agent's TLS material: files when a certificate file is given or no
 * cluster is configured; otherwise a certificate requested from the cluster
 * (which the agent waits for before it dials).
 */
async function agentCredentials(opts: AgentOptions): Promise<{ tls: AgentTLS; manager?: CertificateManager }> {
  const certDir = opts.certDir ?? DEFAULT_AGENT_CERT_DIR;
  const fileMode = opts.certFile !== undefined || opts.keyFile !== undefined || opts.kubeSource === undefined;
  if (fileMode) {
    // Checked here, so a wrong file stops the start with its flag named, not every dial with OpenSSL's words.
    const [ca, pair] = await Promise.all([
      readPemFile(opts.caFile ?? join(certDir, 'ca.crt'), { namedBy: fileFlag('--ca-file', opts.caFile, certDir), kind: 'certificate' }),
      readCertKeyPair({
        cert: { path: opts.certFile ?? join(certDir, 'tls.crt'), namedBy: fileFlag('--cert-file', opts.certFile, certDir) },
        key: { path: opts.keyFile ?? join(certDir, 'tls.key'), namedBy: fileFlag('--key-file', opts.keyFile, certDir) },
      }),
    ]);
    return { tls: { ca, ...pair } };
  }
  // Loaded only in cluster mode: it brings @kubernetes/client-node (~75 MB of RSS).
  const { startClusterCertificate } = await import('./cluster-certificate.js');
  const { ca, manager } = await startClusterCertificate({
    source: opts.kubeSource!,
    certDir,
    nodeName: opts.nodeName,
    nodeIPs: opts.nodeIP !== undefined ? [opts.nodeIP] : [],
    caFile: opts.caFile,
    csrPollMs: opts.csrPollMs,
    logger: opts.logger,
  });
  if (manager.current() === undefined) opts.logger.info('waiting for the client certificate before dialling the server');
  try {
    const pair = await manager.ready();
    return { tls: { ca, cert: pair.cert, key: pair.key }, manager };
  } catch (err: unknown) {
    await manager.stop();
    throw err;
  }
}

/** The search for the server's address (when --tunnelserver-addr is not given), and how to end it. */
interface Discovery {
  abort: AbortController;
  done: Promise<void>;
}

/** Refuses options the agent cannot start with; the identifiers it announces and the destinations it may dial. */
function checkedOptions(opts: AgentOptions): { identifiers: string; allowList: AllowList } {
  if (opts.nodeName === '') throw new TypeError('a node name is required (--node-name or env NODE_NAME)');
  if (opts.tunnelServerAddr === '' && opts.kubeSource === undefined) {
    throw new TypeError(
      "--tunnelserver-addr is required when no cluster is configured (host:port of yurt-tunnel-server's agent port, 10262); " +
        `with --kube-config, --apiserver-addr or the kubelet's kubeconfig the agent finds it from Service ${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE}`,
    );
  }
  if (opts.tunnelServerAddr !== '') parseServerAddresses(opts.tunnelServerAddr);
  if (opts.serverLeases !== undefined && opts.kubeSource === undefined) {
    throw new TypeError("--count-server-leases needs a cluster to read the Leases from: --kube-config, --apiserver-addr or the kubelet's kubeconfig");
  }
  if (opts.nodeIP !== undefined && isIP(opts.nodeIP) === 0) {
    throw new TypeError(`--node-ip ${JSON.stringify(opts.nodeIP)} is not an IP address`);
  }
  const identifiers = opts.agentIdentifiers ?? defaultIdentifiers(opts.nodeName, opts.nodeIP);
  checkIdentifiers(identifiers);
  const allowList =
    opts.allowedDestinations !== undefined ? AllowList.parse(opts.allowedDestinations) : AllowList.defaultFor(opts.nodeIP !== undefined ? [opts.nodeIP] : []);
  return { identifiers, allowList };
}

/** The set of links to the tunnel servers, not started. */
function newClientSet(
  opts: AgentOptions,
  tls: AgentTLS,
  identifiers: string,
  allowList: AllowList,
  metrics: AgentMetrics,
  proxy: ProxyConfig | undefined,
  leases: ServerLeaseCounter | undefined,
): ClientSet {
  return new ClientSet({
    connection: {
      address: opts.tunnelServerAddr,
      transport: opts.transport,
      tls,
      agentID: opts.nodeName,
      identifiers,
      dialer: new Dialer({ allowList, timeoutMs: opts.dialTimeoutMs }),
      keepaliveTimeMs: opts.keepaliveTimeMs,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
      resumeWindowMs: opts.resumeWindowMs ?? DEFAULT_RESUME_WINDOW_MS,
      dialLimit: new DialLimit(opts.maxConcurrentDials),
      proxy,
      metrics,
      logger: opts.logger,
    },
    syncIntervalMs: opts.syncIntervalMs,
    syncIntervalCapMs: opts.syncIntervalCapMs,
    probeIntervalMs: opts.serverProbeIntervalMs,
    leaseCount: leases === undefined ? undefined : { count: () => leases.count(), max: opts.serverLeases?.source === 'max' },
    logger: opts.logger,
  });
}

/** --count-server-leases: the informer on the server Leases, started (loaded only then: it brings the Kubernetes client). */
async function startLeaseCounter(opts: AgentOptions): Promise<ServerLeaseCounter | undefined> {
  if (opts.serverLeases === undefined) return undefined;
  const { createKubeClient } = await import('../kube/client.js');
  const { ServerLeaseCounter } = await import('../kube/server-lease-counter.js');
  const counter = new ServerLeaseCounter({
    client: createKubeClient(opts.kubeSource!),
    namespace: opts.serverLeases.namespace,
    labelSelector: opts.serverLeases.labelSelector,
    logger: opts.logger,
  });
  counter.start();
  opts.logger.info('counting servers from their Leases', {
    namespace: opts.serverLeases.namespace,
    labelSelector: opts.serverLeases.labelSelector,
    source: opts.serverLeases.source,
  });
  return counter;
}

/** The agent's metrics, /readyz (a link to a server) and /debug port; `search.problem` says why no address is known yet. */
function agentMetaServer(opts: AgentOptions, port: number, clients: ClientSet, metrics: AgentMetrics, search: { problem: string }): MetaServer {
  return new MetaServer({
    host: opts.metaHost ?? (opts.nodeIP !== undefined && isIP(opts.nodeIP) === 6 ? '::1' : '127.0.0.1'),
    port,
    headTimeoutMs: opts.metaHeadTimeoutMs,
    registry: metrics.registry,
    readyChecks: {
      'server-link': () =>
        clients.connectedServers > 0
          ? undefined
          : clients.address === ''
            ? `no tunnel server address yet: ${search.problem}`
            : `no link to a tunnel server at ${clients.address} yet`,
    },
    debug: { '/debug/connections': () => clients.connections() },
    raw: opts.enableProfiling === true ? PROFILING_ROUTES : {},
    logger: opts.logger,
  });
}

/** Looks for the server's address in its Service (TUNNEL_NAMESPACE/TUNNEL_SERVICE), then starts the links to it. */
async function discoverServer(opts: AgentOptions, clients: ClientSet, search: { problem: string }): Promise<Discovery> {
  const abort = new AbortController();
  // Loaded only here: an agent given its server's address never loads the Kubernetes client.
  const { createKubeClient } = await import('../kube/client.js');
  const { discoverTunnelServer } = await import('../kube/tunnel-server-discovery.js');
  const done = discoverTunnelServer({
    client: createKubeClient(opts.kubeSource!),
    signal: abort.signal,
    logger: opts.logger,
    retryMs: opts.syncIntervalMs,
    capMs: Math.max(opts.syncIntervalCapMs, opts.syncIntervalMs),
    onProblem: (problem) => (search.problem = problem),
  }).then(
    (address) => {
      clients.setAddress(address);
      clients.start();
    },
    (err: unknown) => {
      if (!abort.signal.aborted) opts.logger.error('the search for the tunnel server failed', { error: String(err) });
    },
  );
  return { abort, done };
}

export class TunnelAgent {
  private stopping: Promise<void> | undefined;

  private constructor(
    readonly clients: ClientSet,
    private readonly opts: AgentOptions,
    /** Cluster mode's certificate. */
    private readonly certificate: CertificateManager | undefined,
    readonly meta: MetaServer | undefined,
    /** Ends the search for the server's address (when --tunnelserver-addr is not given). */
    private readonly discovery: Discovery | undefined,
    /** The server Leases counted (--count-server-leases). */
    private readonly leases: ServerLeaseCounter | undefined,
  ) {}

  static async start(opts: AgentOptions): Promise<TunnelAgent> {
    const { identifiers, allowList } = checkedOptions(opts);
    const proxy = await proxyConfigFrom(opts.proxy ?? {});
    const credentials = await agentCredentials(opts);
    if (opts.startupRehearsal === true) {
      // Loaded only when asked for: an agent without the rehearsal does not load its modules.
      const { runStartupRehearsal } = await import('../grpc/data-path-rehearsal.js');
      const { rehearseAgent } = await import('./rehearsal.js');
      await runStartupRehearsal(
        opts.logger,
        (size) =>
          rehearseAgent({
            ...size,
            tls: { cert: credentials.tls.cert, key: credentials.tls.key },
            resumeWindowMs: opts.resumeWindowMs ?? DEFAULT_RESUME_WINDOW_MS,
          }),
        opts.rehearsalTiering,
      );
    }
    const metrics = new AgentMetrics();
    let leases: ServerLeaseCounter | undefined;
    try {
      leases = await startLeaseCounter(opts);
    } catch (err: unknown) {
      await credentials.manager?.stop();
      throw err;
    }
    const clients = newClientSet(opts, credentials.tls, identifiers, allowList, metrics, proxy, leases);
    const discover = opts.tunnelServerAddr === '';
    const search = { problem: 'not read yet' };
    opts.logger.info('yurt-tunnel-agent starting', {
      agentID: opts.nodeName,
      server: discover ? `from Service ${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE}` : opts.tunnelServerAddr,
      identifiers,
      allowedDestinations: allowList.description,
      ...(proxy !== undefined && { proxy: `${proxy.server.display} (${proxy.server.namedBy})`, noProxy: proxy.noProxy.text }),
      nodeOptions: runningNodeOptions(),
    });
    credentials.manager?.onRotated((pair) => {
      clients.setTLS({ ca: credentials.tls.ca, cert: pair.cert, key: pair.key });
      opts.logger.info('client certificate rotated; new links use it');
    });
    metrics.watch({ serverConnections: () => clients.connectedServers, endpointConnections: () => clients.connCount });
    watchProcess(metrics.registry);
    watchCertificateExpiry(metrics.registry, { agent_client: () => credentials.manager?.current()?.cert ?? credentials.tls.cert });
    const meta = opts.metaPort === undefined ? undefined : agentMetaServer(opts, opts.metaPort, clients, metrics, search);
    try {
      await meta?.start();
    } catch (err: unknown) {
      await credentials.manager?.stop();
      await leases?.stop();
      throw err;
    }
    let discovery: Discovery | undefined;
    if (discover) {
      discovery = await discoverServer(opts, clients, search);
    } else {
      clients.start();
    }
    return new TunnelAgent(clients, opts, credentials.manager, meta, discovery, leases);
  }

  /**
   * Sends DRAIN to every server, then waits until no tunnelled connection is
   * left or the drain timeout passes, then stops.
   */
  async drainAndStop(): Promise<void> {
    this.clients.drain();
    if (!(await this.clients.whenIdle(this.opts.drainTimeoutMs))) {
      this.opts.logger.warn('drain timeout passed; closing remaining connections', { connections: this.clients.connCount });
    }
    await this.stop();
  }

  /** Closes every link and connection. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.discovery?.abort.abort();
      await this.discovery?.done;
      await this.certificate?.stop();
      await this.clients.close();
      await this.leases?.stop();
      await this.meta?.close();
      this.opts.logger.info('yurt-tunnel-agent stopped');
    })();
    return this.stopping;
  }
}
