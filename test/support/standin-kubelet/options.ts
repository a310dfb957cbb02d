// The stand-in kubelet's options, checked and defaulted once.

import type { Logger } from '../../../pkg/log/logger.js';
import { silentLogger } from '../../../pkg/log/logger.js';
import type { PortForwardTarget } from './port-forward.js';

export const WEBSOCKET_EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'] as const;

export interface StandinKubeletOptions {
  /** PEM serving certificate and key. */
  cert: string;
  key: string;
  /** PEM CA that client certificates must chain to (a client certificate is required). */
  clientCA: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
  /** Shown in /stats/summary; default edge-1. */
  nodeName?: string;
  logger?: Logger;
  /** Interval between "follow N" log lines; default 20 ms. */
  followIntervalMs?: number;
  /** A follow stream ends after this many lines; default 100 000. */
  followMaxLines?: number;
  /** Pod port → local TCP address that port-forward connects to. */
  portForwardTargets?: Record<number, PortForwardTarget>;
  /**
   * WebSocket subprotocols accepted for exec/attach, from v5.channel.k8s.io and
   * v4.channel.k8s.io (the default: both). ['v4.channel.k8s.io'] behaves like a
   * v1.24 kubelet, which refuses kubectl v1.32's v5-only offer with 403.
   */
  execWebSocketProtocols?: readonly string[];
  /** How long exec/port-forward wait for the client's streams; default 30 000 ms (kubelet's default). */
  streamCreationTimeoutMs?: number;
  /**
   * How long a WebSocket exec's command takes to start (its first output, its exit); default 50 ms, 0 at once.
   * A real runtime takes about that to start a process; kubectl v1.32 (client-go before
   * kubernetes#131203) discards WebSocket messages that arrive before it has set up its streams.
   */
  execStartDelayMs?: number;
  /** How long a WebSocket/SPDY close waits for the peer; default 1000 ms. */
  closeTimeoutMs?: number;
  /** Entries kept in each record array; default 100 000. */
  maxRecords?: number;
}

export interface ResolvedOptions {
  cert: string;
  key: string;
  clientCA: string;
  host: string;
  port: number;
  nodeName: string;
  logger: Logger;
  followIntervalMs: number;
  followMaxLines: number;
  targets: ReadonlyMap<number, PortForwardTarget>;
  execWebSocketProtocols: readonly string[];
  streamCreationTimeoutMs: number;
  execStartDelayMs: number;
  closeTimeoutMs: number;
  maxRecords: number;
}

function pem(value: unknown, name: string): string {
  if (typeof value !== 'string' || value === '') throw new TypeError(`StandinKubelet: option ${name} must be a non-empty PEM string`);
  return value;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0) throw new TypeError(`StandinKubelet: option ${name} must be a positive number, got ${String(value)}`);
  return v;
}

function notNegative(value: number | undefined, fallback: number, name: string): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v < 0) throw new TypeError(`StandinKubelet: option ${name} must be a number of at least 0, got ${String(value)}`);
  return v;
}

/** Throws TypeError naming the first bad option. */
export function resolveOptions(opts: StandinKubeletOptions): ResolvedOptions {
  const targets = new Map<number, PortForwardTarget>();
  for (const [k, v] of Object.entries(opts.portForwardTargets ?? {})) {
    const port = Number(k);
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new TypeError(`StandinKubelet: portForwardTargets key ${k} is not a TCP port`);
    targets.set(port, v);
  }
  const execWebSocketProtocols = opts.execWebSocketProtocols ?? WEBSOCKET_EXEC_PROTOCOLS;
  for (const p of execWebSocketProtocols) {
    if (!(WEBSOCKET_EXEC_PROTOCOLS as readonly string[]).includes(p)) {
      throw new TypeError(`StandinKubelet: execWebSocketProtocols may hold ${WEBSOCKET_EXEC_PROTOCOLS.join(' and ')}, not ${p}`);
    }
  }
  const port = opts.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new TypeError(`StandinKubelet: option port must be a TCP port or 0, got ${port}`);
  const nodeName = opts.nodeName ?? 'edge-1';
  return {
    cert: pem(opts.cert, 'cert'),
    key: pem(opts.key, 'key'),
    clientCA: pem(opts.clientCA, 'clientCA'),
    host: opts.host ?? '127.0.0.1',
    port,
    nodeName,
    logger: (opts.logger ?? silentLogger()).child({ component: 'standin-kubelet', nodeName }),
    followIntervalMs: positive(opts.followIntervalMs, 20, 'followIntervalMs'),
    followMaxLines: positive(opts.followMaxLines, 100_000, 'followMaxLines'),
    targets,
    execWebSocketProtocols,
    streamCreationTimeoutMs: positive(opts.streamCreationTimeoutMs, 30_000, 'streamCreationTimeoutMs'),
    execStartDelayMs: notNegative(opts.execStartDelayMs, 50, 'execStartDelayMs'),
    closeTimeoutMs: positive(opts.closeTimeoutMs, 1000, 'closeTimeoutMs'),
    maxRecords: positive(opts.maxRecords, 100_000, 'maxRecords'),
  };
}
