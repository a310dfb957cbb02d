#!/usr/bin/env node
// yurt-tunnel-server: flags → pkg/server/app.

import { Command, Option } from 'commander';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import type { AgentsOutput } from '../../pkg/meta/agents-status.js';
import { createLogger } from '../../pkg/log/logger.js';
import {
  DEFAULT_CERT_DIR,
  DEFAULT_EGRESS_SELECTOR_UDS,
  DEFAULT_PROXIER_UDS,
  EGRESS_DIRECT_DIAL_MODES,
  EGRESS_SELECTOR_MODES,
  type EgressDirectDial,
  type EgressSelectorMode,
} from '../../pkg/server/options.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { AGENT_IDENTITY_CHECKS, type AgentIdentityCheck } from '../../pkg/endpoint/agent-identity.js';
import { DEFAULT_MAX_CONNECT_RATE, DEFAULT_MAX_STREAMS_PER_AGENT } from '../../pkg/endpoint/agent-endpoint-settings.js';
import { DEFAULT_MAX_PENDING_DIALS_PER_AGENT } from '../../pkg/tunnel/options.js';
import { DEFAULT_RESUME_MEMORY_BUDGET } from '../../pkg/mux/resume-budget.js';
import { DEFAULT_MAX_UNKNOWN_PACKETS, UNKNOWN_PACKET_WINDOW_MS } from '../../pkg/tunnel/unknown-packets.js';
import { parseProxyStrategies } from '../../pkg/tunnel/backend-registry.js';
import { DEFAULT_HTTP_PROXY_ALLOWED_PORTS } from '../../pkg/kube/server-config.js';
import { holdProcessOpen, onShutdownSignals } from '../common/signals.js';
import { rehearsalTiering } from '../common/v8-tiering.js';
import {
  packageVersion,
  parseBool,
  durationOption,
  parseHostPort,
  parseIP,
  parseIPList,
  parseList,
  parseByteSize,
  parseNonNegativeInt,
  parsePort,
  parsePortList,
  parsePositiveInt,
  resumeWindowOption,
  addProcessOptions,
} from '../common/flags.js';
import { wrapHelpToTerminal } from '../common/help.js';
import { InvalidArgumentError } from 'commander';
import { errorMessage } from '../../pkg/protocol/errors.js';
import { DEFAULT_LEASE_LABEL, DEFAULT_LEASE_NAMESPACE, parseLeaseLabels } from '../../pkg/kube/server-lease-names.js';

interface ServerFlags {
  bindAddress: string;
  insecureBindAddress?: string;
  metaBindAddress?: string;
  tunnelAgentConnectPort: number;
  securePort: number;
  insecurePort: number;
  clientCaFile?: string;
  proxyClientCertFile?: string;
  proxyClientKeyFile?: string;
  kubeletCaFile?: string;
  localhostProxyPorts: number[];
  httpProxyPort: number;
  httpProxyAllowedPorts: number[];
  interceptorProxierUds: string;
  egressSelectorEnable: boolean;
  egressSelectorUds: string;
  egressSelectorMode: EgressSelectorMode;
  egressDirectDial: EgressDirectDial;
  proxyStrategy: ReturnType<typeof parseProxyStrategies>;
  dialTimeout: number;
  stalledConnectionTimeout: number;
  halfClosedLinger: number;
  tlsHandshakeTimeout: number;
  requestHeadTimeout: number;
  connectHeadTimeout: number;
  maxPendingDialsPerAgent: number;
  maxUnknownPacketsPerAgent: number;
  agentIdentityCheck: AgentIdentityCheck;
  forwardedClientCertHeader: string;
  trustedProxyCidrs: string[];
  serverCount: number;
  maxAgentStreams: number;
  resumeWindow: number;
  resumeMemoryBudget: number;
  maxAgentConnectRate: number;
  serverId?: string;
  certDir: string;
  certIps: string[];
  certDnsNames: string[];
  kubeConfig?: string;
  enableIptables: boolean;
  iptablesSyncPeriod: number;
  enableDnsController: boolean;
  dnsSyncPeriod: number;
  enableCsrApprover: boolean;
  serverServiceAccount: string;
  enableLeaseController: boolean;
  leaseNamespace: string;
  leaseLabel: Record<string, string>;
  leaseDuration: number;
  leaseRenewInterval: number;
  leaseGcInterval: number;
  keepaliveTime: number;
  metaPort: number;
  enableProfiling: boolean;
  startupRehearsal: boolean;
  gracefulShutdownTimeout: number;
  keepaliveTimeout: number;
  v: number;
  logFormat: 'text' | 'json';
}

function strategies(text: string): ReturnType<typeof parseProxyStrategies> {
  try {
    return parseProxyStrategies(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(errorMessage(err));
  }
}

const program = new Command('yurt-tunnel-server')
  .description(
    'Cloud side of the yurt tunnel: accepts yurt-tunnel-agents (gRPC, mutual TLS) and sends cloud connections ' +
      'to edge nodes through them. Without a kubeconfig it runs in local certificate mode (its own CA in --cert-dir).',
  )
  .version(packageVersion(), '--version', 'print the version and exit')
  // Options after a subcommand belong to it (issue-agent-cert has its own --cert-dir).
  .enablePositionalOptions()
  .option('--bind-address <ip>', 'IP the agent port and the HTTPS master port listen on', parseIP, '0.0.0.0')
  .option('--insecure-bind-address <ip>', "IP the HTTP master port listens on (default: the loopback of --bind-address's family)", parseIP)
  .option('--tunnel-agent-connect-port <port>', 'port for agents (gRPC AgentService over mutual TLS)', parsePort, 10262)
  .option('--secure-port <port>', 'HTTPS master port: callers with a client certificate reach kubelets here', parsePort, 10263)
  .option('--insecure-port <port>', 'HTTP master port', parsePort, 10264)
  .option('--client-ca-file <path>', "CA of callers' client certificates on the secure port (default in local mode: the local CA)")
  .option('--proxy-client-cert-file <path>', 'certificate presented to kubelets (default in local mode: issued from the local CA)')
  .option('--proxy-client-key-file <path>', 'key of --proxy-client-cert-file')
  .option('--kubelet-ca-file <path>', 'CA of kubelet serving certificates; without it they are not verified')
  .option('--localhost-proxy-ports <list>', "comma list of ports reached on the edge node's loopback, e.g. 10266,10267", parsePortList, [])
  .option(
    '--http-proxy-port <port>',
    'HTTP proxy for cloud clients (Prometheus proxy_url) on --bind-address: TLS with a client certificate from --client-ca-file; ' +
      'absolute-URI requests and CONNECT to a node name or address; 0 is off',
    parsePort,
    0,
  )
  .addOption(
    new Option(
      '--http-proxy-allowed-ports <list>',
      "comma list of destination ports --http-proxy-port lets callers reach (the server ConfigMap's http-proxy-allowed-ports overrides it)",
    )
      .argParser(parsePortList)
      .default([...DEFAULT_HTTP_PROXY_ALLOWED_PORTS], DEFAULT_HTTP_PROXY_ALLOWED_PORTS.join(',')),
  )
  .option('--interceptor-proxier-uds <path>', 'Unix socket of the HTTP CONNECT proxier (CONNECT host:port, optional X-Tunnel-Proxy-Host)', DEFAULT_PROXIER_UDS)
  .option(
    '--egress-selector-enable [bool]',
    "serve kube-apiserver's egress selector (EgressSelectorConfiguration, transport.uds) on --egress-selector-uds",
    parseBool,
    false,
  )
  .option('--egress-selector-uds <path>', "Unix socket kube-apiserver's egress selector dials (its udsName)", DEFAULT_EGRESS_SELECTOR_UDS)
  .option(
    '--egress-selector-mode <mode>',
    "the egress selector's proxyProtocol: http-connect (HTTPConnect) or grpc (GRPC, Konnectivity's ProxyService)",
    parseEgressMode,
    'http-connect' as EgressSelectorMode,
  )
  .option(
    '--egress-direct-dial <mode>',
    'auto: in cluster mode the egress socket dials what no agent serves and is no edge node (openyurt.io/is-edge-worker=true) ' +
      'itself: cloud nodes, webhooks, aggregated APIs; off: everything goes into the tunnel (local mode always)',
    parseEgressDirectDial,
    'auto' as EgressDirectDial,
  )
  .option(
    '--proxy-strategy <list>',
    'how a dial picks its agent, tried in order: destHost (agent advertising the host), default (any agent), defaultRoute (agents with default-route=true)',
    strategies,
    ['destHost'],
  )
  .addOption(durationOption('--dial-timeout <duration>', 'how long a dial waits for the agent to answer before 504', '10s', { min: '1ms', max: '10m' }))
  .addOption(
    durationOption(
      '--stalled-connection-timeout <duration>',
      'with agents that lack per-connection flow control (upstream Go agents): how long one connection whose reader stopped ' +
        "may hold the agent's whole stream paused before that connection is closed (YT_ERR_CONN_STALLED)",
      '5s',
      { min: '1ms', max: '1h' },
    ),
  )
  .addOption(
    durationOption(
      '--half-closed-linger <duration>',
      'with agents that cannot half-close (upstream Go agents): how long a connection whose caller ended its side stays open ' +
        'for the answer without traffic before it is closed',
      '60s',
      { min: '1ms', max: '24h', zero: 'closed when the caller ends its side, as upstream does' },
    ),
  )
  .addOption(
    durationOption(
      '--tls-handshake-timeout <duration>',
      'how long a caller on --secure-port or an agent on --tunnel-agent-connect-port may take to finish its TLS handshake ' + 'before its connection is closed',
      '10s',
      { min: '1ms', max: '1h' },
    ),
  )
  .addOption(
    durationOption(
      '--request-head-timeout <duration>',
      'how long a caller on the master ports (--secure-port, --insecure-port) or --meta-port may take to send a whole request head, counted ' +
        'from its connection (after its TLS handshake) or from the first byte of a later request; slower callers get 408 and are closed',
      '30s',
      { min: '1ms', max: '1h' },
    ),
  )
  .addOption(
    durationOption(
      '--connect-head-timeout <duration>',
      'how long a client of --interceptor-proxier-uds or --egress-selector-uds may take to send its CONNECT head ' +
        '(in grpc mode: to open its first call) before it is closed',
      '10s',
      { min: '1ms', max: '1h' },
    ),
  )
  .option(
    '--max-pending-dials-per-agent <n>',
    'dials one agent may have waiting for its answer at once; more are answered 503 at once (YT_ERR_TOO_MANY_DIALS)',
    parsePositiveInt,
    DEFAULT_MAX_PENDING_DIALS_PER_AGENT,
  )
  .option(
    '--max-unknown-packets-per-agent <n>',
    `packets for connections it does not hold (DATA, DIAL_RSP, CLOSE_RSP) an agent may send in ${UNKNOWN_PACKET_WINDOW_MS / 1000} s; ` +
      'past that its stream is ended with RESOURCE_EXHAUSTED saying why (it reconnects after its backoff); 0 turns the check off',
    parseNonNegativeInt,
    DEFAULT_MAX_UNKNOWN_PACKETS,
  )
  .option(
    '--agent-identity-check <mode>',
    "what an agent's client certificate must name: strict (its agentid as a DNS SAN or CN system:node:<id>, and every " +
      'host= identifier as a DNS SAN and ipv4=/ipv6= identifier as an IP SAN), agent-id (only the agentid), ' +
      'none (trust the metadata, as upstream does; for Go agents whose certificates do not name them)',
    parseIdentityCheck,
    'strict' as AgentIdentityCheck,
  )
  .option(
    '--forwarded-client-cert-header <name>',
    "header in which a load balancer that terminates TLS forwards the agent's client certificate, URL-escaped PEM " +
      '(nginx: $ssl_client_escaped_cert); believed only from --trusted-proxy-cidrs and verified against the agent CA',
    'X-SSL-Client-Cert',
  )
  .option(
    '--trusted-proxy-cidrs <list>',
    'comma list of CIDRs of load balancers whose forwarded client certificates are believed and that may connect to the agent port ' +
      'without a client certificate of their own (default: none, no forwarded certificate is believed)',
    parseList,
    [] as string[],
  )
  .option('--server-count <n>', 'number of server replicas; agents connect until they reach this many distinct servers', parsePositiveInt, 1)
  .addOption(resumeWindowOption())
  .addOption(
    new Option(
      '--resume-memory-budget <bytes>',
      'data all agent links together keep until their agents acknowledge it (session resume; each link also stops at 32Mi); ' +
        'past it new data waits on links keeping an equal share of it or more, and suspended sessions holding some are expired early, oldest first (YT_ERR_RESUME_BUDGET)',
    )
      .argParser(parseByteSize)
      .default(DEFAULT_RESUME_MEMORY_BUDGET, '256Mi'),
  )
  .option(
    '--max-agent-streams <n>',
    'concurrent Connect streams one agent may hold, counted by its client certificate and by its agentID; more are refused with RESOURCE_EXHAUSTED',
    parsePositiveInt,
    DEFAULT_MAX_STREAMS_PER_AGENT,
  )
  .option(
    '--max-agent-connect-rate <n>',
    'new agent streams admitted per second (bursts of twice that); the excess gets UNAVAILABLE and retries after its backoff; 0 admits all',
    parseNonNegativeInt,
    DEFAULT_MAX_CONNECT_RATE,
  )
  .option('--server-id <id>', "this server's ID sent to agents (default: env PROXY_SERVER_ID, else a random UUID)")
  .option('--cert-dir <dir>', 'where the CA and certificates are kept (local mode creates them)', DEFAULT_CERT_DIR)
  .option('--cert-ips <list>', 'comma list of IPs added to the serving certificate', parseIPList, [])
  .option('--cert-dns-names <list>', 'comma list of DNS names added to the serving certificate', parseList, [])
  .option('--kube-config <path>', 'kubeconfig of the cluster (empty: in-cluster config if present, else local mode)')
  .option(
    '--enable-iptables [bool]',
    "cluster mode: DNAT this host's TCP connections to nodes' kubelet ports (10250, 10255) and the ConfigMap's proxy ports " +
      'to the master ports (nat OUTPUT, chains TUNNEL-PORT*), except towards cloud nodes; for a kube-apiserver on this host; needs NET_ADMIN',
    parseBool,
    true,
  )
  .addOption(
    durationOption(
      '--iptables-sync-period <duration>',
      'how often the iptables rules are checked against the nat table (changes of nodes and the ConfigMap apply at once)',
      '60s',
      { min: '15s', max: '24h' },
    ),
  )
  .option(
    '--enable-dns-controller [bool]',
    'run the DNS controller (cluster mode only): node names → addresses in ConfigMap kube-system/yurt-tunnel-nodes (edge nodes → ' +
      "the ClusterIP of x-tunnel-server-internal-svc) for CoreDNS's hosts plugin, and that Service's dnat-<port> ports; " +
      'leader-elected (Lease kube-system/tunnel-dns-controller)',
    parseBool,
    true,
  )
  .addOption(durationOption('--dns-sync-period <duration>', "the DNS controller's full resync besides every change", '1800s', { min: '30s', max: '24h' }))
  .option(
    '--enable-csr-approver [bool]',
    "approve the tunnel's CSRs (cluster mode only) when the requester is who the certificate names: an agent's from its node " +
      "(system:node:<name>) naming only that node and its addresses, the server's from --server-service-account; others stay " +
      'pending with a logged reason; leader-elected (Lease kube-system/tunnel-csr-approver)',
    parseBool,
    true,
  )
  .option(
    '--server-service-account <name>',
    "the server's ServiceAccount in kube-system: the only requester the approver accepts for the server's certificates",
    'yurt-tunnel-server',
  )
  .option(
    '--enable-lease-controller [bool]',
    "publish Konnectivity's server Lease (cluster mode only): konnectivity-proxy-server-<server-id> in --lease-namespace with " +
      '--lease-label, renewed every --lease-renew-interval, and delete expired Leases with that label; agents started with ' +
      '--count-server-leases (ours or upstream Go agents) count the valid ones as the number of servers',
    parseBool,
    false,
  )
  .option('--lease-namespace <namespace>', 'namespace of the server Leases', DEFAULT_LEASE_NAMESPACE)
  .addOption(
    new Option('--lease-label <key=value,...>', "labels set on this server's Lease and selecting the Leases the GC may delete")
      .argParser(parseLeaseLabel)
      .default(parseLeaseLabel(DEFAULT_LEASE_LABEL), DEFAULT_LEASE_LABEL),
  )
  .addOption(durationOption('--lease-duration <duration>', "the Lease's leaseDurationSeconds (whole seconds)", '30s', { min: '1s', max: '1h' }))
  .addOption(
    durationOption('--lease-renew-interval <duration>', 'how often the Lease is renewed (less than --lease-duration)', '15s', { min: '100ms', max: '1h' }),
  )
  .addOption(
    durationOption('--lease-gc-interval <duration>', 'how often expired server Leases with --lease-label are deleted', '15s', { min: '100ms', max: '1h' }),
  )
  .addOption(
    durationOption('--keepalive-time <duration>', 'ping an agent not heard from for this long (and every 6 of these anyway, for its round trip)', '10s', {
      min: '100ms',
      max: '1h',
    }),
  )
  .addOption(durationOption('--keepalive-timeout <duration>', 'drop an agent whose ping is unanswered this long', '20s', { min: '100ms', max: '1h' }))
  .addOption(
    durationOption(
      '--graceful-shutdown-timeout <duration>',
      'on SIGTERM: how long open connections may finish (no new clients or agents are taken meanwhile)',
      '25s',
      { min: '1ms', max: '1h', zero: 'close them at once' },
    ),
  )
  .option(
    '--meta-port <port>',
    'meta server (/healthz, /readyz, /metrics, /debug/agents, /debug/connections, /debug/flags/v) on --meta-bind-address; 0 picks one',
    parsePort,
    10265,
  )
  .option('--meta-bind-address <ip>', "IP the meta server listens on, e.g. the pod's IP for Prometheus (default: --insecure-bind-address)", parseIP);

wrapHelpToTerminal(program);
addProcessOptions(program).action(async (flags: ServerFlags) => {
  holdProcessOpen();
  const logger = createLogger({ verbosity: flags.v, format: flags.logFormat });
  const server = await TunnelServer.start({
    bindAddress: flags.bindAddress,
    insecureBindAddress: flags.insecureBindAddress,
    tunnelAgentConnectPort: flags.tunnelAgentConnectPort,
    securePort: flags.securePort,
    insecurePort: flags.insecurePort,
    clientCAFile: flags.clientCaFile,
    proxyClientCertFile: flags.proxyClientCertFile,
    proxyClientKeyFile: flags.proxyClientKeyFile,
    kubeletCAFile: flags.kubeletCaFile,
    localhostProxyPorts: flags.localhostProxyPorts,
    httpProxyPort: flags.httpProxyPort === 0 ? undefined : flags.httpProxyPort,
    httpProxyAllowedPorts: flags.httpProxyAllowedPorts,
    interceptorProxierUDS: flags.interceptorProxierUds,
    egressSelector: flags.egressSelectorEnable
      ? { uds: flags.egressSelectorUds, mode: flags.egressSelectorMode, directDial: flags.egressDirectDial }
      : undefined,
    proxyStrategies: flags.proxyStrategy,
    dialTimeoutMs: flags.dialTimeout,
    stalledConnectionTimeoutMs: flags.stalledConnectionTimeout,
    halfClosedLingerMs: flags.halfClosedLinger,
    tlsHandshakeTimeoutMs: flags.tlsHandshakeTimeout,
    requestHeadTimeoutMs: flags.requestHeadTimeout,
    connectHeadTimeoutMs: flags.connectHeadTimeout,
    maxPendingDialsPerAgent: flags.maxPendingDialsPerAgent,
    maxUnknownPacketsPerAgent: flags.maxUnknownPacketsPerAgent,
    agentIdentityCheck: flags.agentIdentityCheck,
    forwardedClientCertHeader: flags.forwardedClientCertHeader,
    trustedProxyCIDRs: flags.trustedProxyCidrs,
    serverCount: flags.serverCount,
    maxAgentStreams: flags.maxAgentStreams,
    resumeWindowMs: flags.resumeWindow,
    resumeMemoryBudget: flags.resumeMemoryBudget,
    maxAgentConnectRate: flags.maxAgentConnectRate,
    serverID: flags.serverId ?? process.env.PROXY_SERVER_ID,
    certDir: flags.certDir,
    certIPs: flags.certIps,
    certDNSNames: flags.certDnsNames,
    kubeConfig: flags.kubeConfig,
    enableIptables: flags.enableIptables,
    iptablesSyncPeriodMs: flags.iptablesSyncPeriod,
    enableDNSController: flags.enableDnsController,
    dnsSyncPeriodMs: flags.dnsSyncPeriod,
    enableCSRApprover: flags.enableCsrApprover,
    serverServiceAccount: flags.serverServiceAccount,
    leaseController: flags.enableLeaseController
      ? {
          namespace: flags.leaseNamespace,
          labels: flags.leaseLabel,
          durationMs: flags.leaseDuration,
          renewIntervalMs: flags.leaseRenewInterval,
          gcIntervalMs: flags.leaseGcInterval,
        }
      : undefined,
    keepaliveTimeMs: flags.keepaliveTime,
    keepaliveTimeoutMs: flags.keepaliveTimeout,
    metaPort: flags.metaPort,
    metaBindAddress: flags.metaBindAddress,
    enableProfiling: flags.enableProfiling,
    startupRehearsal: flags.startupRehearsal,
    rehearsalTiering: rehearsalTiering(),
    logger,
  });
  onShutdownSignals(async (signal) => {
    logger.info('shutting down', { signal });
    await server.shutdown(flags.gracefulShutdownTimeout);
  });
});

function parseLeaseLabel(text: string): Record<string, string> {
  try {
    return parseLeaseLabels(text);
  } catch (err: unknown) {
    throw new InvalidArgumentError(errorMessage(err));
  }
}

function parseEgressMode(text: string): EgressSelectorMode {
  const mode = EGRESS_SELECTOR_MODES.find((m) => m === text);
  if (mode === undefined) throw new InvalidArgumentError(`not one of ${EGRESS_SELECTOR_MODES.join(', ')} (got ${JSON.stringify(text)})`);
  return mode;
}

function parseEgressDirectDial(text: string): EgressDirectDial {
  const mode = EGRESS_DIRECT_DIAL_MODES.find((m) => m === text);
  if (mode === undefined) throw new InvalidArgumentError(`not one of ${EGRESS_DIRECT_DIAL_MODES.join(', ')} (got ${JSON.stringify(text)})`);
  return mode;
}

function parseIdentityCheck(text: string): AgentIdentityCheck {
  const mode = AGENT_IDENTITY_CHECKS.find((m) => m === text);
  if (mode === undefined) throw new InvalidArgumentError(`not one of ${AGENT_IDENTITY_CHECKS.join(', ')} (got ${JSON.stringify(text)})`);
  return mode;
}

program
  .command('issue-agent-cert')
  .description('write ca.crt, tls.crt and tls.key for an agent, issued by the local CA in --cert-dir')
  .requiredOption('--node-name <name>', "the agent's node name (its agent ID; goes into a DNS SAN)")
  .requiredOption('--out <dir>', 'directory to write the files to')
  .option('--cert-dir <dir>', "the server's certificate directory holding ca.crt and ca.key", DEFAULT_CERT_DIR)
  .option(
    '--node-ip <list>',
    "comma list of the node's IPs, written as IP SANs (the server's identity check compares ipv4=/ipv6= identifiers with them)",
    parseIPList,
    [],
  )
  .action(async (flags: { nodeName: string; out: string; certDir: string; nodeIp: string[] }) => {
    const files = await writeAgentCertificate({
      certDir: flags.certDir,
      nodeName: flags.nodeName,
      outDir: flags.out,
      nodeIPs: flags.nodeIp,
    });
    process.stdout.write(`wrote ${files.caFile}, ${files.certFile}, ${files.keyFile}\n`);
  });

program
  .command('agents')
  .description('list the agents connected to a running server, from its meta port')
  .option('--meta-addr <host:port>', "the server's meta server", parseHostPort, '127.0.0.1:10265')
  .option('-o, --output <format>', 'table, wide or json', parseAgentsOutput, 'table' as AgentsOutput)
  .action(async (flags: { metaAddr: string; output: AgentsOutput }) => {
    const { fetchAgents, formatAgents } = await import('../../pkg/meta/agents-status.js');
    process.stdout.write(formatAgents(await fetchAgents(flags.metaAddr), flags.output));
  });

function parseAgentsOutput(text: string): AgentsOutput {
  if (text === 'table' || text === 'wide' || text === 'json') return text;
  throw new InvalidArgumentError(`not one of table, wide, json (got ${JSON.stringify(text)})`);
}

program.parseAsync().catch((err: unknown) => {
  process.stderr.write(`yurt-tunnel-server: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
