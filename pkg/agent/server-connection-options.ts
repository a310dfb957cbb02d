// The options of one agent ↔ server link (server-connection.ts).

import type { Logger } from '../log/logger.js';
import type { DialLimit } from './dial-limit.js';
import type { Dialer } from './dialer.js';
import type { AgentMetrics } from './metrics.js';
import type { ProxyConfig } from './proxy/proxy-config.js';
import type { AgentTLS } from './server-dial.js';
import type { AgentTransport } from './transport.js';

/** Keepalive interval shared by a client set's links, so a server's complaint slows them all. */
export interface KeepalivePolicy {
  timeMs: number;
}

export interface ServerConnectionOptions {
  /** host:port of the server's agent endpoint. */
  address: string;
  /** gRPC, a WebSocket, or auto (gRPC, falling back to a WebSocket; transport-choice.ts). Default auto. */
  transport?: AgentTransport;
  /** Name to verify in the server's certificate; default the host of `address`. */
  serverName?: string;
  tls: AgentTLS;
  agentID: string;
  /** The `agentidentifiers` metadata value. */
  identifiers: string;
  dialer: Dialer;
  /** Keepalive ping interval. Default 35 s: Go servers forbid pings more often than every 30 s. */
  keepaliveTimeMs?: number;
  /** Shared, adjustable keepalive (overrides keepaliveTimeMs). */
  keepalive?: KeepalivePolicy;
  /** How long a ping may go unanswered. Default 20 s. */
  keepaliveTimeoutMs?: number;
  /** The HTTP or SOCKS proxy to reach the server through (proxy/proxy-config.ts); undefined: directly. */
  proxy?: ProxyConfig;
  /** How long to wait for the server's response headers. Default 30 s. */
  handshakeTimeoutMs?: number;
  /** HTTP/2 receive window per stream (connection: 4×). Default 4 MiB. */
  receiveWindow?: number;
  /**
   * Receive window per connection announced to the server for yurt-tunnel
   * flow control; 0 does not announce it (upstream behaviour). Default
   * DEFAULT_CONN_WINDOW (128 KiB; it then follows the path, receive-window.ts).
   */
  connWindow?: number;
  /** Announce half-close (CLOSE_WRITE) to the server. Default true. */
  halfClose?: boolean;
  connHighWaterMark?: number;
  /**
   * Bytes a connection takes from its target socket and holds while the link
   * or the server's window is busy, before the socket is paused (the
   * connection's writable highWaterMark). Default CONN_SEND_HIGH_WATER_MARK.
   */
  connSendHighWaterMark?: number;
  /** Dials running at once; share one across links to bound the whole agent. Default: 256 for this link. */
  dialLimit?: DialLimit;
  /** Counts dials and packets; shared by every link of a client set. */
  metrics?: AgentMetrics;
  /** Told whenever a connection through this link has closed (a drain waits on it). */
  onConnectionClosed?: () => void;
  /**
   * Session resume (proto/yurttunnel_ext.proto): announced when > 0; a link
   * that drops without a goodbye keeps its connections this long for a new
   * call to take them back. Default 0 here (the CLI's default is 10 s).
   */
  resumeWindowMs?: number;
  /** The link dropped without a goodbye and its session waits for a resume (the client set dials at once). */
  onSuspended?: (reason: string) => void;
  logger?: Logger;
}
