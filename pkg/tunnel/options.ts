// What a tunnel and each of its dials can be told, and the one check of a
// dial's address, shared by every frontend before it asks.

import type { Registry } from 'prom-client';
import type { Logger } from '../log/logger.js';
import type { ProxyStrategy } from './backend-registry.js';

/** Dials one agent may have waiting for its DIAL_RSP by default; more are refused at once. */
export const DEFAULT_MAX_PENDING_DIALS_PER_AGENT = 500;

export interface TunnelOptions {
  /** Tried in order; default `['destHost']`. */
  strategies?: readonly ProxyStrategy[];
  /** How long a dial may wait for the agent's DIAL_RSP. Default 10 s. */
  dialTimeoutMs?: number;
  /** Per-connection buffer each way before back-pressure. Default 256 KiB. */
  connHighWaterMark?: number;
  /**
   * With agents that cannot half-close (upstream): how long a connection whose
   * caller has ended its side keeps waiting for the rest of the answer while
   * nothing arrives. Default 60 s.
   */
  lingerAfterEndMs?: number;
  /**
   * With agents that have no per-connection flow control: how long one
   * connection's stopped reader may hold the agent's whole stream paused
   * before that connection is closed. Default 5 s.
   */
  stalledConnectionTimeoutMs?: number;
  /** Dials one agent (all its streams) may have pending; more get YT_ERR_TOO_MANY_DIALS at once. Default 500. */
  maxPendingDialsPerAgent?: number;
  /**
   * Packets for connections it does not hold (DATA, DIAL_RSP, CLOSE_RSP) an
   * agent may send in UNKNOWN_PACKET_WINDOW_MS before its stream is ended;
   * 0 turns the limit off. Default 1000.
   */
  maxUnknownPacketsPerAgent?: number;
  /**
   * DATA bytes all resumable agent links together keep until their agents
   * acknowledge them (session resume). Past it writers wait, and suspended
   * sessions holding some are expired early, oldest first
   * (YT_ERR_RESUME_BUDGET); live links only wait. Default 256 MiB
   * (DEFAULT_RESUME_MEMORY_BUDGET).
   */
  resumeMemoryBudget?: number;
  /**
   * Why a dial to `address` through `agent` would come back into this server
   * (its address is one of the server's own listeners), or undefined; such a
   * dial fails with YT_ERR_DIAL_LOOP before anything is sent to the agent.
   */
  loopCheck?: (address: string, agent: { agentID: string; remoteAddress: string }) => string | undefined;
  logger?: Logger;
  /** Where metrics register; default a registry of the tunnel's own. */
  metricsRegistry?: Registry;
  /** Source of dial IDs; default random in [1, 2^63-1]. Tests use it to pin extreme values. */
  newDialID?: () => bigint;
}

export interface DialOptions {
  /**
   * Chooses the agent instead of the address's host: the value of
   * X-Tunnel-Proxy-Host (a port, if any, is ignored).
   */
  proxyHost?: string;
  /** Gives up the dial (YT_ERR_DIAL_CANCELLED; the agent is told with DIAL_CLS). */
  signal?: AbortSignal;
  /** Overrides the tunnel's dial timeout for this dial. */
  timeoutMs?: number;
}

/** Checks `host:port` (IPv6 in brackets) and returns an error message, or undefined if usable. */
export function checkDialAddress(address: string): string | undefined {
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  const control = /[\x00-\x1f\x7f]/.exec(address);
  if (control !== null) {
    return `dial address ${JSON.stringify(address)} has a control character (0x${control[0].charCodeAt(0).toString(16).padStart(2, '0')}); a host name or address has none`;
  }
  const m = /^(\[[0-9A-Fa-f:.%\w]+\]|[^\s:[\]/]+):(\d{1,5})$/.exec(address);
  if (m === null) return `dial address ${JSON.stringify(address)} is not host:port`;
  const port = Number(m[2]);
  if (port < 1 || port > 65535) return `dial address ${JSON.stringify(address)} has port ${port} out of range 1-65535`;
  return undefined;
}
