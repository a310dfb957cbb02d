// The agent endpoint's options, their defaults, and the servers they
// configure (mTLS; HTTP/2 with its windows and stream limits).

import http2 from 'node:http2';
import { createServer as createTLSServer, type Server as TLSServer } from 'node:tls';
import type { Registry } from 'prom-client';
import type { Logger } from '../log/logger.js';
import { DEFAULT_CONN_WINDOW } from '../protocol/flow-control.js';
import { DEFAULT_RESUME_WINDOW_MS } from '../protocol/resume.js';
import type { AgentIdentityCheck } from './agent-identity.js';
import { DEFAULT_FORWARDED_CLIENT_CERT_HEADER } from './forwarded-cert.js';

/** New agent streams admitted per second by default (a restart of 1000 agents takes ~10 s to settle). */
export const DEFAULT_MAX_CONNECT_RATE = 100;
/** Default time a connection has to finish its TLS handshake. */
export const DEFAULT_AGENT_TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

export interface AgentEndpointTLS {
  cert: string;
  key: string;
  /** CA bundle that signs agent client certificates. */
  ca: string;
}

export interface AgentEndpointOptions {
  host?: string;
  /** 0 picks a free port. Default 10262. */
  port?: number;
  tls: AgentEndpointTLS;
  serverID: string;
  /** Announced to agents in the `servercount` header. Default 1. */
  serverCount?: number;
  /** Interval of our keepalive pings. Default 10 s. */
  keepaliveTimeMs?: number;
  /** How long a ping may go unanswered before the connection is dropped. Default 20 s. */
  keepaliveTimeoutMs?: number;
  /** Pings more frequent than this are strikes (Go's EnforcementPolicy.MinTime). Default 30 s. */
  minPingIntervalMs?: number;
  /** HTTP/2 receive window per stream. Default 4 MiB. */
  streamWindowSize?: number;
  /** HTTP/2 receive window per connection. Default 16 MiB. */
  connectionWindowSize?: number;
  /** Largest gRPC message accepted from an agent. Default 4 MiB. */
  maxMessageSize?: number;
  /**
   * Receive window per connection offered to agents that announce flow
   * control (proto/yurttunnel_ext.proto); 0 turns the extension off.
   * Default 1 MiB.
   */
  connWindow?: number;
  /**
   * Concurrent Connect calls one agent may hold, counted both by its client
   * certificate and by its agentID; more are refused with RESOURCE_EXHAUSTED.
   * Default 4 (an agent needs one per server replica it reaches through this one address).
   */
  maxStreamsPerAgent?: number;
  /** New Connect calls admitted per second (a token bucket with a burst of twice that); 0 admits all. Default 100. */
  maxConnectRate?: number;
  /** Bytes of control packets that may wait unwritten on one agent call before it is cut off. Default 1 MiB. */
  controlBufferLimit?: number;
  /** What an agent's client certificate must name (agent-identity.ts). Default `strict`. */
  identityCheck?: AgentIdentityCheck;
  /** Offer half-close (CLOSE_WRITE) to agents that announce it. Default true. */
  halfClose?: boolean;
  /** How long a connection may take to finish its TLS handshake before it is closed. Default 10 s. */
  tlsHandshakeTimeoutMs?: number;
  /**
   * Session resume (proto/yurttunnel_ext.proto): how long an agent's
   * connections wait for it after its link dropped without a goodbye, when
   * the agent announces resume too (the shorter window of both is used);
   * 0 turns it off. Default 10 s.
   */
  resumeWindowMs?: number;
  /**
   * The header in which a load balancer that terminated TLS forwards the
   * agent's client certificate (URL-escaped PEM, nginx's
   * $ssl_client_escaped_cert). Default X-SSL-Client-Cert.
   */
  forwardedClientCertHeader?: string;
  /**
   * Peers (CIDRs or addresses) whose forwarded certificates are believed, and
   * who may connect without a client certificate of their own. Default none.
   */
  trustedProxyCIDRs?: string[];
  logger?: Logger;
  /** Where the endpoint's counters register (refusals, refused callers); default a registry of its own. */
  metricsRegistry?: Registry;
}

export const DEFAULT_MAX_STREAMS_PER_AGENT = 4;

/** HTTP/2 streams one agent connection may open at once (refused calls count until answered). */
const MAX_CONCURRENT_STREAMS = 16;

/** The options with their defaults applied. */
export type Settings = Required<Omit<AgentEndpointOptions, 'host' | 'logger' | 'metricsRegistry'>> & { host: string };

/** The options with their defaults. */
export function settingsOf(opts: AgentEndpointOptions): Settings {
  return {
    host: opts.host ?? '0.0.0.0',
    port: opts.port ?? 10262,
    tls: opts.tls,
    serverID: opts.serverID,
    serverCount: opts.serverCount ?? 1,
    keepaliveTimeMs: opts.keepaliveTimeMs ?? 10_000,
    keepaliveTimeoutMs: opts.keepaliveTimeoutMs ?? 20_000,
    minPingIntervalMs: opts.minPingIntervalMs ?? 30_000,
    streamWindowSize: opts.streamWindowSize ?? 4 * 1024 * 1024,
    connectionWindowSize: opts.connectionWindowSize ?? 16 * 1024 * 1024,
    maxMessageSize: opts.maxMessageSize ?? 4 * 1024 * 1024,
    connWindow: opts.connWindow ?? DEFAULT_CONN_WINDOW,
    maxStreamsPerAgent: opts.maxStreamsPerAgent ?? DEFAULT_MAX_STREAMS_PER_AGENT,
    identityCheck: opts.identityCheck ?? 'strict',
    halfClose: opts.halfClose ?? true,
    controlBufferLimit: opts.controlBufferLimit ?? 1024 * 1024,
    maxConnectRate: opts.maxConnectRate ?? DEFAULT_MAX_CONNECT_RATE,
    tlsHandshakeTimeoutMs: opts.tlsHandshakeTimeoutMs ?? DEFAULT_AGENT_TLS_HANDSHAKE_TIMEOUT_MS,
    resumeWindowMs: opts.resumeWindowMs ?? DEFAULT_RESUME_WINDOW_MS,
    forwardedClientCertHeader: (opts.forwardedClientCertHeader ?? DEFAULT_FORWARDED_CLIENT_CERT_HEADER).toLowerCase(),
    trustedProxyCIDRs: opts.trustedProxyCIDRs ?? [],
  };
}

/**
 * The servers agents connect to: a TLS server (mTLS) whose connections go,
 * by ALPN, to an HTTP/2 server (h2: gRPC, windows and stream limits from
 * `settings`) or to the endpoint's HTTP/1.1 server (http/1.1, or no ALPN:
 * the WebSocket transport). node:http2's own secure server decides ALPN
 * itself and would give HTTP/1.1 to its compatibility layer.
 */
export function agentServer(tls: AgentEndpointTLS, settings: Settings): { tlsServer: TLSServer; h2: http2.Http2Server } {
  const tlsServer = createTLSServer({
    cert: tls.cert,
    key: tls.key,
    ca: tls.ca,
    requestCert: true,
    // With trusted proxies, a connection without a valid client certificate
    // completes its handshake and is refused (or let through) per peer in
    // AgentEndpoint.onSecureConnection; without, TLS refuses it as ever.
    rejectUnauthorized: settings.trustedProxyCIDRs.length === 0,
    minVersion: 'TLSv1.2',
    ALPNProtocols: ['h2', 'http/1.1'],
    handshakeTimeout: settings.tlsHandshakeTimeoutMs,
  });
  const h2 = http2.createServer({
    maxSessionMemory: 64,
    // An agent link carries one long-lived Connect stream, so HPACK's dynamic
    // tables never save a byte; they cost each link ~1.8 KiB in nghttp2 for
    // its life (the agent's request head and our response head, indexed).
    maxDeflateDynamicTableSize: 0,
    settings: {
      headerTableSize: 0,
      initialWindowSize: settings.streamWindowSize,
      maxConcurrentStreams: Math.max(MAX_CONCURRENT_STREAMS, settings.maxStreamsPerAgent),
    },
  });
  return { tlsServer, h2 };
}
