// The agent's set of server links, keyed by serverID. A sync loop keeps
// dialling the server address until it holds links to `servercount` distinct
// servers (behind a load balancer each dial may land on any replica), and
// redials when a link drops, with jittered exponential backoff on failures.
// Given several addresses (servers without a load balancer), it dials those
// it holds no link through first, each failed one waiting out its own backoff
// (server-addresses.ts).

import { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { ServerConnectionError } from './errors.js';
import { Backoff } from '../timers/backoff.js';
import { IdleWaiters } from '../timers/idle.js';
import { sleep } from '../timers/sleep.js';
import { dialServerLink, type DialedCall } from './transport-choice.js';
import { ServerConnection, type AgentTLS } from './server-connection.js';
import { parseServerAddresses, ServerAddresses } from './server-addresses.js';
import type { KeepalivePolicy, ServerConnectionOptions } from './server-connection-options.js';

/** While a session is suspended, failed dials are retried after a delay drawn from this range (ms), not the growing backoff. */
const SUSPENDED_RETRY_MS = { min: 50, max: 500 };

/**
 * While a session is suspended, a dial gives up its TCP connect after this
 * long and the next follows within SUSPENDED_RETRY_MS, with a new SYN: Linux
 * would resend a dropped one only after 1 s and 3 s more (before 6.5; see
 * server-dial.ts).
 * Every dial, not only those to the address the session waits on: dials
 * run one at a time, so any of them hanging holds the resume up.
 */
const SUSPENDED_CONNECT_TIMEOUT_MS = 1000;

/**
 * "could not connect … will retry" lines written per minute; the rest are
 * counted in one summary line. A server that stays down otherwise costs a
 * line every few seconds for as long as it is down (18 a minute were seen).
 */
export const RETRY_LOG_LIMIT = { burst: 3, intervalMs: 60_000 };

export interface ClientSetOptions {
  /** `connection.address` may be a comma list of host:port: servers the agent spreads over. */
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
  /**
   * Count servers from Konnectivity's server Leases (--count-server-leases):
   * `count()` gives the valid Leases; `max` takes the larger of that and the
   * servers' own servercount, else the Leases' count wins whenever one is
   * valid (none valid: the servercount header).
   */
  leaseCount?: { count(): number; max: boolean };
  logger?: Logger;
}

/** A dial reached a server we hold while a session waits for another: retry soon. */
class DuplicateLink extends ServerConnectionError {
  constructor(serverID: string) {
    super('YT_ERR_CONNECT_FAILED', `reached server ${serverID} again while a session waits for another replica`);
  }
}

export class ClientSet {
  private readonly clients = new Map<string, ServerConnection>();
  /** Sessions whose link dropped without a goodbye, by serverID, waiting for a resume (session resume). */
  private readonly suspended = new Map<string, ServerConnection>();
  private readonly opts: ClientSetOptions;
  private readonly log: Logger;
  private readonly retryLog: LogLimiter;
  private readonly backoff: Backoff;
  private readonly syncIntervalMs: number;
  /** Where the servers are; with several, each has its own backoff. */
  private addresses: ServerAddresses;
  /** The address of the dial under way (or of the last one). */
  private dialedAddress = '';
  /** One keepalive interval for every link, so a server's too_many_pings slows them all. */
  private readonly keepalive: KeepalivePolicy;
  /** The server count announced by the newest distinct server. */
  private serverCount = 1;
  /** The number of servers last wanted, for the line that says it changed. */
  private lastWanted: number | undefined;
  /** Aborts the dial under way (close(), or a session suspended meanwhile: onSuspended()). */
  private dialing: AbortController | undefined;
  /** The dial under way gives up its TCP connect early (a session waited when it began). */
  private dialingBounded = false;
  private lastProbe = 0;
  private draining = false;
  private stopped = false;
  private closing: Promise<void> | undefined;
  /** Whoever waits for the last connection to end (a drain). */
  private readonly idle = new IdleWaiters(() => this.connCount);
  private loop: Promise<void> | undefined;
  /** Cuts the current pause between syncs short (a link dropped, or close()). */
  private wake: AbortController | undefined;
  /** A wake-up that came while no pause was under way: the next pause returns at once. */
  private wokenEarly = false;

  constructor(opts: ClientSetOptions) {
    this.opts = opts;
    this.log = opts.logger ?? silentLogger();
    this.retryLog = new LogLimiter(this.log, RETRY_LOG_LIMIT);
    this.syncIntervalMs = opts.syncIntervalMs ?? 1000;
    this.keepalive = opts.connection.keepalive ?? { timeMs: opts.connection.keepaliveTimeMs ?? 35_000 };
    this.backoff = new Backoff(this.backoffOptions());
    this.addresses = this.addressesOf(opts.connection.address);
  }

  private backoffOptions(): ConstructorParameters<typeof Backoff>[0] {
    return { initialMs: this.syncIntervalMs, factor: 1.5, jitter: 0.1, fullJitter: true, capMs: this.opts.syncIntervalCapMs ?? 10_000 };
  }

  /** '' (not known yet) is no address. */
  private addressesOf(text: string): ServerAddresses {
    return new ServerAddresses(text === '' ? [] : parseServerAddresses(text), this.backoffOptions());
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** The server address for the next links (found after construction, e.g. from the cluster). */
  setAddress(address: string): void {
    this.opts.connection = { ...this.opts.connection, address };
    this.addresses = this.addressesOf(address);
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
    return this.allSessions().flatMap(([serverID, c]) => c.connections().map((conn) => ({ serverID, ...conn })));
  }

  /** Linked and suspended sessions: both hold open connections. */
  private allSessions(): [string, ServerConnection][] {
    return [...this.clients.entries(), ...this.suspended.entries()];
  }

  /** Sessions waiting for a resume. */
  get suspendedServers(): number {
    return this.suspended.size;
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
    for (const [, c] of this.allSessions()) n += c.pendingDialCount;
    return n;
  }

  /** Tunnelled connections open through every link. */
  get connCount(): number {
    let n = 0;
    for (const [, c] of this.allSessions()) n += c.connCount;
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
        const wait = await this.syncOnce();
        this.backoff.reset();
        delay = wait ?? this.backoff.jittered(this.syncIntervalMs);
      } catch (err: unknown) {
        delay = this.backoff.next();
        // A session waits for its server: try again soon, not after the grown backoff.
        if (this.suspended.size > 0) delay = SUSPENDED_RETRY_MS.min + Math.random() * (SUSPENDED_RETRY_MS.max - SUSPENDED_RETRY_MS.min);
        let retryIn = delay;
        if (this.addresses.size > 1) {
          // That address waits out its own backoff; the next sync tries another at once, or waits for the first one due.
          retryIn = this.addresses.failed(this.dialedAddress, this.suspended.size > 0 ? delay : undefined);
          delay = 0;
        }
        this.retryLog.warn('could not connect to the tunnel server; will retry', {
          server: this.dialedAddress,
          retryInMs: Math.round(retryIn),
          error: errorMessage(err),
        });
      }
      await this.pause(delay);
    }
  }

  /**
   * One step: dial a new link if fewer than serverCount distinct servers are
   * held, a suspended session waits for its server, or to probe for a new
   * one. The call presents a claim for every suspended session (behind a load
   * balancer it cannot know which replica it reaches); the server's answer
   * says which session, if any, it carries. Returns how long to wait before
   * the next step when the address due must first wait out its backoff.
   */
  private async syncOnce(): Promise<number | undefined> {
    if (this.draining || this.stopped || this.addresses.size === 0) return undefined;
    const probe = this.clients.size >= this.wantedServers() && this.suspended.size === 0;
    if (probe) {
      const every = this.opts.probeIntervalMs ?? 30_000;
      if (!(every > 0) || Date.now() - this.lastProbe < every) return undefined;
    }
    const { address, waitMs } = this.addresses.next(
      new Set([...this.clients.values()].map((c) => c.address)),
      new Set([...this.suspended.values()].map((c) => c.address)),
    );
    if (waitMs > 0) return waitMs;
    if (probe) this.lastProbe = Date.now();
    this.dialedAddress = address;
    await this.dialOnce(address, probe);
    return undefined;
  }

  /** Dials `address` and keeps what answers: a new link, a resumed session, or nothing (a duplicate). */
  private async dialOnce(address: string, probe: boolean): Promise<void> {
    const conn = this.newConnection(address);
    const claims = [...this.suspended.values()].flatMap((s) => s.nextClaim() ?? []);
    const connectTimeoutMs = this.suspended.size > 0 ? SUSPENDED_CONNECT_TIMEOUT_MS : undefined;
    this.dialing = new AbortController();
    this.dialingBounded = connectTimeoutMs !== undefined;
    let dialed: DialedCall;
    try {
      dialed = await dialServerLink({ ...conn.dialTarget(claims), probe, connectTimeoutMs }, this.log, this.dialing.signal);
    } finally {
      this.dialing = undefined;
    }
    this.addresses.succeeded(address);
    const { identity, offer } = dialed;
    // stop() may have run during the dial.
    if (this.stopped) {
      conn.adopt(dialed);
      conn.close('agent is stopping');
      return;
    }
    if (offer?.resumedReceived !== undefined) {
      const held = [...this.suspended.entries()].find(([, s]) => s.sessionToken === offer.token);
      if (held === undefined) {
        // We gave that session up meanwhile: say goodbye, so the server ends it too.
        conn.adopt(dialed);
        conn.close('the session it resumes has expired here');
        return;
      }
      const [serverID, session] = held;
      this.suspended.delete(serverID);
      this.clients.set(identity.serverID, session);
      // Watched since its first call: whenClosed() covers the session's whole life.
      session.resumeOn(dialed, offer.resumedReceived);
      // A resumed link is a link made again: it counts for flapping as a new one does.
      this.opts.connection.metrics?.serverConnected();
      this.giveUpSessionsOfGoneServers();
      return;
    }
    const lost = this.suspended.get(identity.serverID);
    if (lost !== undefined) {
      // That server answered "new": it no longer holds our session (it restarted, or the window passed there).
      this.suspended.delete(identity.serverID);
      lost.expire('lost_by_server');
    }
    if (this.clients.has(identity.serverID)) {
      // A load balancer sent us to a server we already hold; try again later.
      conn.adopt(dialed);
      conn.close(`duplicate link to server ${identity.serverID}`);
      this.log.verbose(2, 'already connected to this server; closing the duplicate link', { serverID: identity.serverID });
      if (this.suspended.size > 0) throw new DuplicateLink(identity.serverID);
      return;
    }
    conn.adopt(dialed);
    this.clients.set(identity.serverID, conn);
    this.serverCount = identity.serverCount;
    // The next probe comes a whole interval after the last new server, not at once.
    this.lastProbe = Date.now();
    this.log.info('connected to tunnel server', {
      server: conn.address,
      transport: dialed.transport,
      serverID: identity.serverID,
      serverCount: identity.serverCount,
      flowControl: identity.flow !== undefined,
      sessionResume: offer !== undefined,
      connectedServers: this.clients.size,
    });
    this.opts.connection.metrics?.serverConnected();
    this.watch(identity.serverID, conn);
    this.giveUpSessionsOfGoneServers();
  }

  /** How many distinct servers to hold links to: the servers' servercount, or the count of their Leases. */
  private wantedServers(): number {
    const leases = this.opts.leaseCount;
    const counted = leases?.count() ?? 0;
    const wanted = counted === 0 ? this.serverCount : leases!.max ? Math.max(counted, this.serverCount) : counted;
    if (wanted !== this.lastWanted && leases !== undefined) {
      this.log.info('server count changed', {
        serverCount: wanted,
        validLeases: counted,
        serverCountHeader: this.serverCount,
        connectedServers: this.clients.size,
      });
    }
    this.lastWanted = wanted;
    return wanted;
  }

  /**
   * Links held to as many distinct servers as there are, none of them the one
   * a suspended session waits for: that server is gone (it died without a
   * goodbye and another took its place; a restarted server has a new serverID).
   * Waiting out the window would keep its connections hanging and, dialling
   * every 50–500 ms, hand the live servers a duplicate link each time: after a
   * lone server's restart, every agent at once.
   */
  private giveUpSessionsOfGoneServers(): void {
    if (this.clients.size < this.wantedServers()) return;
    for (const [serverID, session] of this.suspended) {
      this.suspended.delete(serverID);
      session.expire('server_gone');
    }
  }

  private newConnection(address: string): ServerConnection {
    let conn: ServerConnection | undefined = undefined;
    conn = new ServerConnection({
      ...this.opts.connection,
      address,
      keepalive: this.keepalive,
      onConnectionClosed: () => this.idle.check(),
      onSuspended: (reason) => this.onSuspended(conn!, reason),
    });
    return conn;
  }

  /** A held link dropped without a goodbye: its session waits; dial at once. */
  private onSuspended(conn: ServerConnection, reason: string): void {
    for (const [serverID, c] of this.clients) {
      if (c !== conn) continue;
      this.clients.delete(serverID);
      this.suspended.set(serverID, conn);
      this.log.warn('lost the link to tunnel server; resuming its session', { serverID, reason, connectedServers: this.clients.size });
    }
    // A dial under way that began while no session waited (a probe, another server) may sit on SYN
    // resends for the whole handshake timeout, and dials run one at a time: it gives way to one that gives up early.
    if (this.dialing !== undefined && !this.dialingBounded) {
      const text = `dial given up for one with a ${SUSPENDED_CONNECT_TIMEOUT_MS} ms connect timeout, as a session waits to resume`;
      this.dialing.abort(new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server ${this.dialedAddress}: ${text}`));
    }
    this.wakeUp();
  }

  /** Forgets `conn` under `serverID` once it closes, and dials again. */
  private watch(serverID: string, conn: ServerConnection): void {
    void conn.whenClosed().then((reason) => {
      const held = this.clients.get(serverID) === conn;
      if (held) this.clients.delete(serverID);
      if (this.suspended.get(serverID) === conn) this.suspended.delete(serverID);
      this.idle.check();
      if (this.stopped) return;
      // A suspended session that expired has said so itself ('session with the tunnel server expired').
      if (held) this.log.warn('lost connection to tunnel server; reconnecting', { serverID, reason, connectedServers: this.clients.size });
      this.wakeUp();
    });
  }

  private async pause(ms: number): Promise<void> {
    if (this.stopped) return;
    if (this.wokenEarly) {
      this.wokenEarly = false;
      return;
    }
    const wake = new AbortController();
    this.wake = wake;
    await sleep(ms, wake.signal);
    this.wake = undefined;
  }

  private wakeUp(): void {
    // A wake-up during a dial (no pause under way) must not be lost: the next pause is skipped.
    if (this.wake === undefined) this.wokenEarly = true;
    else this.wake.abort();
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
    this.dialing?.abort();
    for (const [, c] of this.allSessions()) c.close('agent is stopping');
    this.clients.clear();
    this.suspended.clear();
    await this.loop;
    this.retryLog.flush();
  }
}
