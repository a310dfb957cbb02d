// The egress selector's way to what the tunnel does not reach. kube-apiserver's
// `cluster` egress selection sends every connection to its egress socket: the
// kubelets of cloud nodes, admission webhooks and aggregated APIs (Service and
// pod addresses) too, not only edge nodes. A destination no agent serves that
// names no edge node is dialled from this process, with the tunnel's dial
// timeout; an edge node's stays the tunnel's (and its precise 503 when its
// agent is away). Only the egress frontends use this: their Unix sockets only
// kube-apiserver can open. The network-reachable master ports never do, so
// they cannot be used to reach arbitrary hosts from the server.

import { addAbortListener } from 'node:events';
import { connect, type Socket } from 'node:net';
import { silentLogger, type Logger } from '../log/logger.js';
import { ConnectionSet } from '../net/connection-set.js';
import { IdleWaiters } from '../timers/idle.js';
import { Counter, type Registry } from '../metrics/prom.js';
import type { EdgeNodeTest } from '../nodes/node-resolver.js';
import { DialError, errorMessage, type DialFailureReason } from '../protocol/errors.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import { checkDialAddress } from '../tunnel/options.js';
import type { Tunnel } from '../tunnel/tunnel.js';

const DIRECT_DIALS = 'yurttunnel_server_direct_dials_total';

/** Result label of a direct dial: `connected`, or the failure's reason code. */
type DirectDialResult = 'connected' | DialFailureReason;

function directDialsCounter(registry: Registry): Counter<'result'> {
  const existing = registry.getSingleMetric(DIRECT_DIALS);
  if (existing !== undefined) return existing as Counter<'result'>;
  return new Counter({
    name: DIRECT_DIALS,
    help: 'Egress-selector dials the server made itself, not through the tunnel (--egress-direct-dial), by result.',
    labelNames: ['result'],
    registers: [registry],
  });
}

export interface DirectDialerOptions {
  /** Who is an edge node: their connections never leave the tunnel. */
  isEdgeNode: EdgeNodeTest;
  /** The tunnel's dial timeout (--dial-timeout). */
  timeoutMs: number;
  metricsRegistry?: Registry;
  logger?: Logger;
}

export class DirectDialer {
  private readonly log: Logger;
  private readonly counter: Counter<'result'> | undefined;
  /** Ids for the egress gRPC stream's DIAL_RSP: a direct connection has no agent to number it. */
  private nextConnectID = 1n;
  /** Direct connections open now: a graceful shutdown waits for them as for tunnelled ones. */
  private readonly open = new ConnectionSet();
  private readonly idle = new IdleWaiters(() => this.open.size);

  constructor(
    private readonly tunnel: Tunnel,
    private readonly opts: DirectDialerOptions,
  ) {
    this.log = (opts.logger ?? silentLogger()).child({ component: 'direct-dial' });
    this.counter = opts.metricsRegistry === undefined ? undefined : directDialsCounter(opts.metricsRegistry);
  }

  /**
   * Whether the connection to `address` is dialled here: it is well formed,
   * names no node by X-Tunnel-Proxy-Host, no agent serves its host, and its
   * host is not an edge node's.
   */
  takes(address: string, proxyHost?: string): boolean {
    if (proxyHost !== undefined || checkDialAddress(address) !== undefined) return false;
    const host = removePortFromHost(address);
    return !this.tunnel.serves(host) && !this.opts.isEdgeNode(host);
  }

  /** Direct connections open now. */
  get openCount(): number {
    return this.open.size;
  }

  /** Resolves true once no direct connection is open, false if `ms` passes first. */
  whenIdle(ms: number): Promise<boolean> {
    return this.idle.wait(ms);
  }

  /** A connect ID for a direct connection on an egress gRPC stream. */
  connectID(): bigint {
    return this.nextConnectID++;
  }

  /**
   * Connects to `address` (host:port, IPv6 in brackets). Exactly one of
   * `connected` and `failed` is called; a failure is a DialError whose
   * message says the dial was direct.
   */
  dial(address: string, signal: AbortSignal, connected: (socket: Socket) => void, failed: (err: DialError) => void): void {
    const host = removePortFromHost(address);
    const port = Number(address.slice(address.lastIndexOf(':') + 1));
    const started = performance.now();
    let settled = false;
    let cancelled: Disposable | undefined;
    const socket = connect({ host, port });
    const settle = (): boolean => {
      if (settled) return false;
      settled = true;
      clearTimeout(timer);
      cancelled?.[Symbol.dispose]();
      socket.off('connect', onConnect);
      socket.off('error', onError);
      return true;
    };
    const fail = (code: DialFailureReason, message: string): void => {
      if (!settle()) return;
      socket.destroy();
      this.counter?.inc({ result: code });
      this.log.verbose(2, 'direct dial failed', { dialAddress: address, reason: code, error: message });
      failed(new DialError(code, message));
    };
    const onConnect = (): void => {
      if (!settle()) return;
      this.counter?.inc({ result: 'connected' satisfies DirectDialResult });
      this.log.verbose(2, 'direct dial connected', { dialAddress: address, dialMs: Math.round(performance.now() - started) });
      this.open.add(socket);
      socket.once('close', () => this.idle.check());
      connected(socket);
    };
    const onError = (err: Error): void =>
      fail(
        'YT_ERR_DIAL_FAILED',
        `direct dial (not through the tunnel: no agent serves ${host} and it is no edge node) to ${address} failed: ${errorMessage(err)}`,
      );
    const timer = setTimeout(
      () => fail('YT_ERR_DIAL_TIMEOUT', `direct dial (not through the tunnel) to ${address} did not connect within ${this.opts.timeoutMs} ms`),
      this.opts.timeoutMs,
    );
    timer.unref();
    socket.once('connect', onConnect);
    socket.once('error', onError);
    const cancel = (): void => fail('YT_ERR_DIAL_CANCELLED', `direct dial to ${address} was cancelled by the caller`);
    if (signal.aborted) cancel();
    else cancelled = addAbortListener(signal, cancel);
  }
}
