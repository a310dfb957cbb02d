// What yurt-tunnel-server is told: the options its CLI parses into, with
// the defaults the CLI shows.

import { isIP } from 'node:net';
import type { Registry } from 'prom-client';
import type { AgentIdentityCheck } from '../endpoint/agent-identity.js';
import type { RehearsalTiering } from '../grpc/data-path-rehearsal.js';
import type { Logger } from '../log/logger.js';
import type { ProxyStrategy } from '../tunnel/backend-registry.js';

export const DEFAULT_CERT_DIR = '/var/lib/yurttunnel-server/pki';
export const DEFAULT_PROXIER_UDS = '/tmp/interceptor-proxier.sock';
export const DEFAULT_EGRESS_SELECTOR_UDS = '/tmp/yurt-tunnel-egress-selector.sock';

/** How kube-apiserver's egress selector speaks to us (its proxyProtocol). */
export type EgressSelectorMode = 'http-connect' | 'grpc';
export const EGRESS_SELECTOR_MODES: readonly EgressSelectorMode[] = ['http-connect', 'grpc'];

/**
 * Whether the egress socket dials what the tunnel does not reach itself
 * (pkg/frontend/direct-dial.ts): `auto` in cluster mode, where the Nodes say
 * which hosts are edge nodes'; `off` sends everything into the tunnel. Local
 * mode never dials directly: without Nodes an edge node whose agent is away
 * cannot be told from a cloud host.
 */
export type EgressDirectDial = 'auto' | 'off';
export const EGRESS_DIRECT_DIAL_MODES: readonly EgressDirectDial[] = ['auto', 'off'];

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
  /**
   * The HTTP proxy for cloud clients (pkg/interceptor/http-proxy.ts) on bindAddress: off when undefined; 0 picks a
   * port (the CLI's --http-proxy-port 0 means off).
   */
  httpProxyPort?: number;
  /** Destination ports the HTTP proxy lets callers reach, while the server ConfigMap does not say; default 9100,10250,10255. */
  httpProxyAllowedPorts?: number[];
  interceptorProxierUDS: string;
  /** Serve kube-apiserver's egress selector on egressSelectorUDS, in egressSelectorMode. */
  egressSelector?: { uds: string; mode: EgressSelectorMode; directDial?: EgressDirectDial };
  proxyStrategies: ProxyStrategy[];
  dialTimeoutMs: number;
  /** See TunnelOptions.stalledConnectionTimeoutMs. */
  stalledConnectionTimeoutMs?: number;
  /** See TunnelOptions.lingerAfterEndMs (agents that cannot half-close). */
  halfClosedLingerMs?: number;
  /** What an agent's certificate must name; default `strict`. */
  agentIdentityCheck?: AgentIdentityCheck;
  /** See AgentEndpointOptions.forwardedClientCertHeader (--forwarded-client-cert-header). */
  forwardedClientCertHeader?: string;
  /** See AgentEndpointOptions.trustedProxyCIDRs (--trusted-proxy-cidrs). */
  trustedProxyCIDRs?: string[];
  /** Time a caller on the secure master port, or an agent, has for its TLS handshake. Default 10 s. */
  tlsHandshakeTimeoutMs?: number;
  /** Time a caller on a master port or the meta port has for its request head. Default 30 s. */
  requestHeadTimeoutMs?: number;
  /** Time a client of the proxier or egress socket has for its CONNECT head (or its first gRPC call). Default 10 s. */
  connectHeadTimeoutMs?: number;
  /** See TunnelOptions.maxPendingDialsPerAgent. */
  maxPendingDialsPerAgent?: number;
  /** See TunnelOptions.maxUnknownPacketsPerAgent. */
  maxUnknownPacketsPerAgent?: number;
  /** See TunnelOptions.resumeMemoryBudget (--resume-memory-budget). */
  resumeMemoryBudget?: number;
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
  /** Cluster mode: approve the tunnel's CSRs whose requester is who they name (leader-elected). Default on. */
  enableCSRApprover?: boolean;
  /** The server's ServiceAccount in kube-system, the only requester of its certificates. Default yurt-tunnel-server. */
  serverServiceAccount?: string;
  /**
   * Cluster mode: publish Konnectivity's server Lease and collect expired ones
   * (--enable-lease-controller; pkg/kube/server-lease.ts). Off when undefined.
   */
  leaseController?: ServerLeaseSettings;
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** Concurrent Connect streams per agent (certificate and agentID). Default 4. */
  maxAgentStreams?: number;
  /** Session resume's window (--resume-window); 0 turns it off. Default 10 s. */
  resumeWindowMs?: number;
  /** New agent streams admitted per second; 0 admits all. Default 100. */
  maxAgentConnectRate?: number;
  /** The meta server (/healthz, /readyz, /metrics, /debug/*): port (10265; 0 picks one) on insecureBindAddress. */
  metaPort?: number;
  /** The meta server's address; default insecureBindAddress (the monitoring pack sets the pod's IP). */
  metaBindAddress?: string;
  /** Serve CPU profiles and heap snapshots on the meta port. */
  enableProfiling?: boolean;
  /** Rehearse the data path before listening (pkg/grpc/data-path-rehearsal.ts); off unless the CLI is given --startup-rehearsal. */
  startupRehearsal?: boolean;
  /** What V8 is told around the rehearsal (the CLIs: cmd/common/v8-tiering.ts's rehearsalTiering). */
  rehearsalTiering?: RehearsalTiering;
  logger: Logger;
  metricsRegistry?: Registry;
  /** Cluster mode: how often a pending CertificateSigningRequest is read (default 1 s). */
  csrPollMs?: number;
}

export interface ServerLeaseSettings {
  namespace: string;
  labels: Record<string, string>;
  durationMs?: number;
  renewIntervalMs?: number;
  gcIntervalMs?: number;
}

/** The loopback address of `ip`'s family (the insecure port's default, as OpenYurt). */
export function loopbackFor(ip: string): string {
  return isIP(ip) === 6 ? '::1' : '127.0.0.1';
}
