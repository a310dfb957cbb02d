#!/usr/bin/env node
// yurt-tunnel-agent: flags → pkg/agent/app.

import { Command, InvalidArgumentError, Option } from 'commander';
import { DEFAULT_AGENT_CERT_DIR, TunnelAgent } from '../../pkg/agent/app.js';
import { agentKubeConfigSource } from '../../pkg/kube/config-source.js';
import { createLogger } from '../../pkg/log/logger.js';
import { holdProcessOpen, onShutdownSignals } from '../common/signals.js';
import { rehearsalTiering } from '../common/v8-tiering.js';
import {
  durationOption,
  packageVersion,
  parseBool,
  parseHostPortOrURL,
  parseIP,
  parsePort,
  parsePositiveInt,
  resumeWindowOption,
  addProcessOptions,
} from '../common/flags.js';
import { wrapHelpToTerminal } from '../common/help.js';
import { DEFAULT_MAX_CONCURRENT_DIALS } from '../../pkg/agent/dial-limit.js';
import { parseServerAddresses } from '../../pkg/agent/server-addresses.js';
import { AGENT_TRANSPORTS, type AgentTransport } from '../../pkg/agent/transport.js';
import { DEFAULT_LEASE_LABEL, DEFAULT_LEASE_NAMESPACE } from '../../pkg/kube/server-lease-names.js';

/** --tunnelserver-addr: one host:port or a comma list, each checked; kept as the trimmed comma list. */
function parseServerAddressList(text: string): string {
  try {
    return parseServerAddresses(text).join(',');
  } catch (err: unknown) {
    throw new InvalidArgumentError(err instanceof Error ? err.message : String(err));
  }
}

interface AgentFlags {
  nodeName?: string;
  nodeIp?: string;
  tunnelserverAddr?: string;
  proxyUrl?: string;
  proxyCredentialsFile?: string;
  proxyCaFile?: string;
  transport: AgentTransport;
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  certDir: string;
  kubeConfig?: string;
  apiserverAddr?: string;
  agentIdentifiers?: string;
  allowedDestinations?: string;
  dialTimeout: number;
  keepaliveTime: number;
  keepaliveTimeout: number;
  syncInterval: number;
  syncIntervalCap: number;
  serverProbeInterval: number;
  countServerLeases: boolean;
  leaseNamespace: string;
  leaseLabelSelector: string;
  serverCountSource: 'default' | 'max';
  drainTimeout: number;
  resumeWindow: number;
  maxConcurrentDials: number;
  metaHost?: string;
  metaPort: number;
  enableProfiling: boolean;
  startupRehearsal: boolean;
  v: number;
  logFormat: 'text' | 'json';
}

const program = new Command('yurt-tunnel-agent')
  .description(
    'Edge side of the yurt tunnel: dials out to yurt-tunnel-server, keeps a gRPC stream open, and opens the ' +
      'connections the server asks for (kubelet logs, exec, port-forward, metrics) if its allow-list permits them.',
  )
  .version(packageVersion(), '--version', 'print the version and exit')
  .option('--node-name <name>', "this node's name, used as the agent ID (default: env NODE_NAME)")
  .option('--node-ip <ip>', "this node's IP, advertised and allowed by default (default: env NODE_IP)", parseIP)
  .option(
    '--tunnelserver-addr <host:port,...>',
    "address of yurt-tunnel-server's agent port (10262), or a comma list of the servers' addresses when no load balancer is in front: " +
      'the agent links to servercount distinct servers over them (default in cluster mode: found from Service kube-system/x-tunnel-server-svc: ' +
      'its LoadBalancer ingress, a cloud node for a NodePort, or its x-tunnel-server-external-addr annotation)',
    parseServerAddressList,
  )
  .addOption(
    new Option(
      '--transport <transport>',
      'how to reach the server: grpc (HTTP/2), websocket (through L7 load balancers that speak HTTP/1.1), or auto: gRPC, ' +
        'falling back to a WebSocket when the path refuses HTTP/2, remembering what worked',
    )
      .choices(AGENT_TRANSPORTS)
      .default('auto'),
  )
  .option(
    '--proxy-url <url>',
    'HTTP(S) or SOCKS5 proxy to reach the server through: http://, https:// (CONNECT) or socks5://, socks5h:// with optional user:password@ ' +
      '(default: env https_proxy, HTTPS_PROXY, all_proxy, ALL_PROXY; NO_PROXY exempts servers in both cases)',
  )
  .option('--proxy-credentials-file <path>', "a file holding the proxy's user:password (wins over credentials in the proxy URL)")
  .option(
    '--proxy-ca-file <path>',
    "CA certificates (PEM) that an https:// proxy's certificate must lead to, instead of Node's built-in list and NODE_EXTRA_CA_CERTS",
  )
  .option(
    '--cert-dir <dir>',
    'where certificates are kept: ca.crt, tls.crt, tls.key given to the agent, or the one it requests from the cluster',
    DEFAULT_AGENT_CERT_DIR,
  )
  .option('--ca-file <path>', "CA that signs the server's certificate (default: the cluster CA in cluster mode, else <cert-dir>/ca.crt)")
  .option('--cert-file <path>', "this agent's client certificate (default: <cert-dir>/tls.crt; without it and with a cluster, one is requested by CSR)")
  .option('--key-file <path>', "this agent's client key (default: <cert-dir>/tls.key)")
  .option(
    '--kube-config <path>',
    "kubeconfig used to request the client certificate and read server Leases (default: --apiserver-addr, else the kubelet's /etc/kubernetes/kubelet.conf when present)",
  )
  .option(
    '--apiserver-addr <host:port>',
    "kube-apiserver address (host:port or https:// URL), used with this pod's service-account token when no kubeconfig is given",
    parseHostPortOrURL,
  )
  .option(
    '--agent-identifiers <query>',
    'what this agent serves, URL-query syntax with keys ipv4, ipv6, host, cidr, default-route (default: ipv4=<node-ip>&host=<node-name>)',
  )
  .option(
    '--allowed-destinations <list>',
    'comma list of CIDR or CIDR:port the server may ask this agent to dial; * allows all (default: loopback and the node IP, any port)',
  )
  .addOption(durationOption('--dial-timeout <duration>', 'how long to try to connect to a destination', '5s', { min: '1ms', max: '10m' }))
  .addOption(
    durationOption('--keepalive-time <duration>', 'ping the server when not heard from for this long (Go servers refuse < 30s)', '35s', {
      min: '100ms',
      max: '1h',
    }),
  )
  .addOption(durationOption('--keepalive-timeout <duration>', 'reconnect when a ping is unanswered this long', '20s', { min: '100ms', max: '1h' }))
  .addOption(durationOption('--sync-interval <duration>', 'first reconnect delay (grows ×1.5 per failure)', '1s', { min: '100ms', max: '10m' }))
  .addOption(durationOption('--sync-interval-cap <duration>', 'longest reconnect delay', '10s', { min: '100ms', max: '1h' }))
  .addOption(
    durationOption(
      '--server-probe-interval <duration>',
      'while holding servercount servers, dial the address this often anyway, to find replicas added behind it',
      '30s',
      { min: '1s', max: '24h', zero: 'never' },
    ),
  )
  .option(
    '--count-server-leases [bool]',
    "count the servers from Konnectivity's server Leases (published by servers with --enable-lease-controller) instead of " +
      'their servercount header, which stays the fallback while no Lease is valid; needs the kubeconfig (the RBAC: leases get, list, watch in --lease-namespace)',
    parseBool,
    false,
  )
  .option('--lease-namespace <namespace>', 'namespace of the server Leases', DEFAULT_LEASE_NAMESPACE)
  .option('--lease-label-selector <selector>', 'label selector of the server Leases', DEFAULT_LEASE_LABEL)
  .addOption(
    new Option(
      '--server-count-source <source>',
      'with --count-server-leases: default (the valid Leases) or max (the larger of those and the servercount header)',
    )
      .choices(['default', 'max'])
      .default('default'),
  )
  .addOption(resumeWindowOption())
  .addOption(
    durationOption('--drain-timeout <duration>', 'on SIGTERM, how long to wait for open connections after sending DRAIN', '30s', {
      min: '1ms',
      max: '1h',
      zero: 'exit at once',
    }),
  )
  .option(
    '--max-concurrent-dials <n>',
    'dials to destinations running at once; a dial beyond this is refused at once (the client gets 502)',
    parsePositiveInt,
    DEFAULT_MAX_CONCURRENT_DIALS,
  )
  .option(
    '--meta-host <ip>',
    "address of the meta server (/healthz, /readyz, /metrics, /debug/connections, /debug/flags/v) (default: the loopback of --node-ip's family)",
    parseIP,
  )
  .option('--meta-port <port>', 'port of the meta server; 0 picks one', parsePort, 10266);

wrapHelpToTerminal(program);
addProcessOptions(program).action(async (flags: AgentFlags) => {
  holdProcessOpen();
  const logger = createLogger({ verbosity: flags.v, format: flags.logFormat });
  const agent = await TunnelAgent.start({
    nodeName: flags.nodeName ?? process.env.NODE_NAME ?? '',
    nodeIP: flags.nodeIp ?? (process.env.NODE_IP || undefined),
    tunnelServerAddr: flags.tunnelserverAddr ?? '',
    proxy: { proxyUrl: flags.proxyUrl, credentialsFile: flags.proxyCredentialsFile, caFile: flags.proxyCaFile, env: process.env },
    transport: flags.transport,
    certDir: flags.certDir,
    kubeSource: agentKubeConfigSource({ kubeConfig: flags.kubeConfig, apiserverAddr: flags.apiserverAddr }),
    caFile: flags.caFile,
    certFile: flags.certFile,
    keyFile: flags.keyFile,
    agentIdentifiers: flags.agentIdentifiers,
    allowedDestinations: flags.allowedDestinations,
    dialTimeoutMs: flags.dialTimeout,
    keepaliveTimeMs: flags.keepaliveTime,
    keepaliveTimeoutMs: flags.keepaliveTimeout,
    syncIntervalMs: flags.syncInterval,
    syncIntervalCapMs: flags.syncIntervalCap,
    serverProbeIntervalMs: flags.serverProbeInterval,
    serverLeases: flags.countServerLeases
      ? { namespace: flags.leaseNamespace, labelSelector: flags.leaseLabelSelector, source: flags.serverCountSource }
      : undefined,
    drainTimeoutMs: flags.drainTimeout,
    resumeWindowMs: flags.resumeWindow,
    maxConcurrentDials: flags.maxConcurrentDials,
    metaHost: flags.metaHost,
    metaPort: flags.metaPort,
    enableProfiling: flags.enableProfiling,
    startupRehearsal: flags.startupRehearsal,
    rehearsalTiering: rehearsalTiering(),
    logger,
  });
  onShutdownSignals(async (signal) => {
    logger.info('draining before exit', { signal, drainTimeoutMs: flags.drainTimeout });
    await agent.drainAndStop();
  });
});

program.parseAsync().catch((err: unknown) => {
  process.stderr.write(`yurt-tunnel-agent: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
