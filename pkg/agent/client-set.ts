// The agent's set of server links, keyed by serverID. A sync loop keeps
// dialling the server address until it holds links to `servercount` distinct
// servers (behind a load balancer each dial may land on any replica), and
// redials when a link drops, with jittered exponential backoff on failures.

import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { Backoff } from '../timers/backoff.js';
import { IdleWaiters } from '../timers/idle.js';
import { sleep } from '../timers/sleep.js';
import { ServerConnection, type AgentTLS, type KeepalivePolicy, type ServerConnectionOptions } from './server-connection.js';

export interface ClientSetOptions {
  connection: ServerConnectionOptions;
  /** First retry delay and the pause between syncs. Default 1 s. */
  syncIntervalMs?: number;
  /** Longest retry delay. Default 10 s. */
  syncIntervalCapMs?: number;
  /**
   * While holding servercount servers, dial once this often anyway, so that a
   * replica added behind the address is found (and kept) without a restart.
   * 0 never probes. Default 30 s.
   */
  probeIntervalMs?: number;
  logger?: Logger;
}

export class ClientSet {
  private readonly clients = new Map<string, ServerConnection>();
  private readonly opts: ClientSetOptions;
  private readonly log: Logger;
  private readonly backoff: Backoff;
  private readonly syncIntervalMs: number;
  /** One keepalive interval for every link, so a server's too_many_pings slows them all. */
  private readonly keepalive: KeepalivePolicy;
  /** The server count announced by the newest distinct server. */
  private serverCount = 1;
  private dialing: ServerConnection | undefined;
  private lastProbe = 0;
  private draining = false;
  private stopped = false;
  private closing: Promise<void> | undefined;
  /** Whoever waits for the last connection to end (a drain). */
  private readonly idle = new IdleWaiters(() => this.connCount);
  private loop: Promise<void> | undefined;
  /** Cuts the current pause between syncs short (a link dropped, or close()). */
  private wake: AbortController | undefined;

  constructor(opts: ClientSetOptions) {
    this.opts = opts;
    this.log = opts.logger ?? silentLogger();
    this.syncIntervalMs = opts.syncIntervalMs ?? 1000;
    this.keepalive = opts.connection.keepalive ?? { timeMs: opts.connection.keepaliveTimeMs ?? 35_000 };
    this.backoff = new Backoff({ initialMs: this.syncIntervalMs, factor: 1.5, jitter: 0.1, fullJitter: true, capMs: opts.syncIntervalCapMs ?? 10_000 });
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** The server address for the next links (found after construction, e.g. from the cluster). */
  setAddress(address: string): void {
    this.opts.connection = { ...this.opts.connection, address };
  }

  get address(): string {
    return this.opts.connection.address;
  }

  /** Certificates for the next links; links already up keep theirs until they reconnect. */
  setTLS(tls: AgentTLS): void {
    this.opts.connection = { ...this.opts.connection, tls };
  }

  /** Open connections of every link, with the server each came through. */
  connections(): ({ serverID: string } & ReturnType<ServerConnection['connections']>[number])[] {
    return [...this.clients.entries()].flatMap(([serverID, c]) => c.connections().map((conn) => ({ serverID, ...conn })));
  }

  /** Number of servers currently linked. */
  get connectedServers(): number {
    return this.clients.size;
  }

  get serverIDs(): string[] {
    return [...this.clients.keys()];
  }

  /** Dials in progress on every link. */
  get pendingDialCount(): number {
    let n = 0;
    for (const c of this.clients.values()) n += c.pendingDialCount;
    return n;
  }

  /** Tunnelled connections open through every link. */
  get connCount(): number {
    let n = 0;
    for (const c of this.clients.values()) n += c.connCount;
    return n;
  }

  /** Resolves true once no tunnelled connection is open, false if `ms` passes first. */
  whenIdle(ms: number): Promise<boolean> {
    return this.idle.wait(ms);
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      let delay: number;
      try {
        await this.syncOnce();
        this.backoff.reset();
        delay = this.backoff.jittered(this.syncIntervalMs);
      } catch (err: unknown) {
        delay = this.backoff.next();
        this.log.warn('could not connect to the tunnel server; will retry', {
          server: this.opts.connection.address,
          retryInMs: Math.round(delay),
          error: errorMessage(err),
        });
      }
      await this.pause(delay);
    }
  }

  /** One step: dial a new link if fewer than serverCount distinct servers are held, or to probe for a new one. */
  private async syncOnce(): Promise<void> {
    if (this.draining || this.stopped) return;
    if (this.clients.size >= this.serverCount) {
      const every = this.opts.probeIntervalMs ?? 30_000;
      if (!(every > 0) || Date.now() - this.lastProbe < every) return;
      this.lastProbe = Date.now();
    }
    const conn = new ServerConnection({ ...this.opts.connection, keepalive: this.keepalive, onConnectionClosed: () => this.idle.check() });
    this.dialing = conn;
    let identity;
    try {
      identity = await conn.open();
    } finally {
      this.dialing = undefined;
    }
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run during the dial
    if (this.stopped) {
      conn.close('agent is stopping');
      return;
    }
    if (this.clients.has(identity.serverID)) {
      // A load balancer sent us to a server we already hold; try again later.
      conn.close(`duplicate link to server ${identity.serverID}`);
      this.log.verbose(2, 'already connected to this server; closing the duplicate link', { serverID: identity.serverID });
      return;
    }
    this.clients.set(identity.serverID, conn);
    this.serverCount = identity.serverCount;
    // The next probe comes a whole interval after the last new server, not at once.
    this.lastProbe = Date.now();
    this.log.info('connected to tunnel server', {
      server: conn.address,
      serverID: identity.serverID,
      serverCount: identity.serverCount,
      flowControl: identity.flow !== undefined,
      connectedServers: this.clients.size,
    });
    void conn.whenClosed().then((reason) => {
      if (this.clients.get(identity.serverID) === conn) this.clients.delete(identity.serverID);
      if (this.stopped) return;
      this.log.warn('lost connection to tunnel server; reconnecting', {
        serverID: identity.serverID,
        reason,
        connectedServers: this.clients.size,
      });
      this.wakeUp();
    });
  }

  private async pause(ms: number): Promise<void> {
    if (this.stopped) return;
    const wake = new AbortController();
    this.wake = wake;
    await sleep(ms, wake.signal);
    this.wake = undefined;
  }

  private wakeUp(): void {
    this.wake?.abort();
  }

  /** Stops making links and sends DRAIN on every link (connections keep flowing). */
  drain(): void {
    if (this.draining) return;
    this.draining = true;
    for (const c of this.clients.values()) c.drain();
    this.log.info('draining: told every server to send new connections elsewhere', { servers: this.clients.size });
  }

  /** Closes every link and stops the loop. Idempotent: a second call waits for the first. */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.stopped = true;
    this.wakeUp();
    this.dialing?.close('agent is stopping');
    for (const c of this.clients.values()) c.close('agent is stopping');
    this.clients.clear();
    await this.loop;
  }
}
