// Server ports mapped to an address on a node (the server ConfigMap's
// tcp-proxy-ports; SuperEdge's TCP module): each listens on the server, and
// each connection it accepts is a tunnelled connection to that address,
// dialled by that node's agent. Raw TCP both ways, nothing parsed.
// apply() brings the listeners to a new set of mappings, live:
// - added: a listener opens (one that cannot, say the port is taken, is one
//   error line naming the entry; the others apply);
// - target changed: new connections go to the new target;
// - listen address changed: the old listener closes, a new one opens;
// - removed: the listener closes.
// Connections already open are left to finish in every case: cutting a
// transfer would lose data that a raw TCP client cannot tell from a network
// failure, and they end when either side closes (or the server stops).

import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { Counter, type Registry } from '../metrics/prom.js';
import { splice } from '../mux/splice.js';
import { ConnectionSet } from '../net/connection-set.js';
import { listen } from '../net/listen.js';
import { DialError, errorMessage } from '../protocol/errors.js';
import type { Tunnel } from '../tunnel/tunnel.js';

/** One mapping: the server's port (on listenHost, or the default host) to `address` through `node`'s agent. */
export interface PortMapping {
  readonly listenHost: string | undefined;
  readonly port: number;
  readonly node: string;
  readonly address: string;
}

export interface TcpPortMapOptions {
  /** Where a mapping without a listen IP listens: the insecure master port's address (loopback by default). */
  defaultHost: string;
  logger: Logger;
  metricsRegistry?: Registry;
}

interface Listener {
  server: Server;
  host: string;
  /** Read for each new connection: a changed target applies from the next one. */
  mapping: PortMapping;
}

function describe(m: PortMapping, host: string): string {
  return `${host.includes(':') ? `[${host}]` : host}:${m.port}=${m.node}/${m.address}`;
}

export class TcpPortMap {
  private readonly listeners = new Map<number, Listener>();
  /** Every connection of every listener, those of closed listeners too. */
  private readonly sockets = new ConnectionSet();
  /** Listeners closed by apply() that still wait for their connections to end. */
  private readonly closing = new Set<Promise<void>>();
  private readonly limited: LogLimiter;
  private readonly total: Counter<'result'>;
  /** apply() calls run one after another. */
  private queue: Promise<void> = Promise.resolve();
  /** stopAccepting() or close() was called: no listener opens again. */
  private stopped = false;
  private closed: Promise<void> | undefined;

  constructor(
    private readonly tunnel: Tunnel,
    private readonly opts: TcpPortMapOptions,
  ) {
    this.limited = new LogLimiter(opts.logger);
    this.total = new Counter({
      name: 'yurttunnel_server_tcp_proxy_connections_total',
      help: 'Connections to the ports mapped by tcp-proxy-ports, by result: connected, or the YT_ERR_* code of the failed dial.',
      labelNames: ['result'],
      registers: opts.metricsRegistry === undefined ? [] : [opts.metricsRegistry],
    });
  }

  /** Brings the listeners to `mappings` (by port); resolves once each new listener listens or has failed (logged). */
  apply(mappings: ReadonlyMap<number, PortMapping>): Promise<void> {
    this.queue = this.queue.then(() => this.sync(mappings));
    return this.queue;
  }

  private async sync(mappings: ReadonlyMap<number, PortMapping>): Promise<void> {
    if (this.stopped) return;
    const log = this.opts.logger;
    for (const [port, l] of this.listeners) {
      const wanted = mappings.get(port);
      if (wanted !== undefined && (wanted.listenHost ?? this.opts.defaultHost) === l.host) continue;
      this.stopListener(port, l);
      log.info('mapped port closed; its open connections go on until they end', { mapping: describe(l.mapping, l.host) });
    }
    for (const [port, mapping] of mappings) {
      const host = mapping.listenHost ?? this.opts.defaultHost;
      const open = this.listeners.get(port);
      if (open !== undefined) {
        if (open.mapping.node !== mapping.node || open.mapping.address !== mapping.address) {
          log.info('mapped port retargeted; new connections go to the new target', {
            mapping: describe(mapping, host),
            before: describe(open.mapping, host),
          });
        }
        open.mapping = mapping;
        continue;
      }
      // Half-open: a client that has finished sending still gets the rest of the answer.
      const l: Listener = { server: createServer({ pauseOnConnect: true, allowHalfOpen: true }, (socket) => this.onConnection(l, socket)), host, mapping };
      try {
        await listen(l.server, { host, port }, { name: `mapped port ${describe(mapping, host)}`, logger: log });
      } catch (err: unknown) {
        log.error('mapped port cannot listen; this entry is skipped, the others apply', {
          mapping: describe(mapping, host),
          error: errorMessage(err),
        });
        continue;
      }
      this.listeners.set(port, l);
      log.info('mapped port listening', { mapping: describe(mapping, host) });
    }
  }

  private stopListener(port: number, l: Listener): void {
    this.listeners.delete(port);
    // close() calls back only once every connection has ended: they are left to finish.
    const done = new Promise<void>((resolve) => l.server.close(() => resolve()));
    this.closing.add(done);
    void done.then(() => this.closing.delete(done));
  }

  private onConnection(l: Listener, socket: Socket): void {
    this.sockets.add(socket);
    socket.on('error', (err) => this.opts.logger.verbose(3, 'mapped port connection error', { port: l.mapping.port, error: errorMessage(err) }));
    const { node, address, port } = l.mapping;
    // A client that resets while its dial is pending cancels it; one that is only quiet waits for the dial, paused.
    const gone = new AbortController();
    const onClose = (): void => gone.abort();
    socket.once('close', onClose);
    this.tunnel.dial(address, { proxyHost: node, signal: gone.signal }).then(
      (conn) => {
        socket.off('close', onClose);
        if (socket.destroyed) {
          conn.destroy();
          return;
        }
        this.total.inc({ result: 'connected' });
        splice(socket, conn);
      },
      (err: unknown) => {
        socket.off('close', onClose);
        const code = err instanceof DialError ? err.code : 'unknown';
        this.total.inc({ result: code });
        this.limited.warn('mapped port could not reach its target; connection reset', {
          port,
          node,
          dialAddress: address,
          reason: code,
          error: errorMessage(err),
        });
        // A reset, not an end: a raw TCP client must not take a failed dial for an empty answer.
        if (!socket.destroyed) socket.resetAndDestroy();
      },
    );
  }

  /** Where the mapped ports listen now (a dial to one of them through the tunnel would loop). */
  addresses(): AddressInfo[] {
    return [...this.listeners.values()].flatMap((l) => {
      const a = l.server.address();
      return a !== null && typeof a === 'object' ? [a] : [];
    });
  }

  /** Connections open through mapped ports, of closed listeners too. */
  get connectionCount(): number {
    return this.sockets.size;
  }

  /** Graceful shutdown: every listener closes, for good; open connections go on. */
  stopAccepting(): Promise<void> {
    this.queue = this.queue.then(() => {
      this.stopped = true;
      for (const [port, l] of this.listeners) this.stopListener(port, l);
    });
    return this.queue;
  }

  /** Closes every listener and connection. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    this.closed ??= (async () => {
      this.stopped = true;
      await this.queue;
      this.limited.flush();
      for (const [port, l] of this.listeners) this.stopListener(port, l);
      this.sockets.destroyAll();
      await Promise.all([...this.closing]);
    })();
    return this.closed;
  }
}
