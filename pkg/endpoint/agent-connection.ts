// One agent's HTTP/2 connection to the endpoint: its keepalive pings, grpc-go's
// ping policy (fed by what we write on it), and the agent calls riding on it.
// Its close path stops every timer it started.

import http2, { type Http2Session } from 'node:http2';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { Keepalive, transportBytesRead } from '../grpc/keepalive.js';
import { PingPolicy, TOO_MANY_PINGS } from '../grpc/ping-policy.js';
import { GrpcStatus } from '../grpc/status.js';
import type { LogLimiter } from '../log/log-limiter.js';
import { errorMessage } from '../protocol/errors.js';
import type { ServedCall } from './served-call.js';

/** An agent heard all the time is still pinged every this many keepalive intervals, so that /debug/agents shows a recent round trip. */
const ROUND_TRIP_EVERY_INTERVALS = 6;

/**
 * How often a connection is looked at for a peer that stopped mid-flow (watchFlowStopping).
 * One interval per connection, measured (idle server, 1,000 agent links, 2 cores): the watch
 * costs ~1 % of a core, mostly reading bytesRead; one endpoint-wide timer walking them all
 * saved only the timers' own share (~0.3-0.7 points, within run-to-run noise), so it was not taken.
 */
const FLOW_LOOK_MS = 250;
/** Bytes heard between two looks that make a flow (a full DATA frame); pings and their answers do not. */
const FLOW_BYTES = 16 * 1024;
/**
 * How long, at least, a peer that stopped mid-flow has to show a sign of life.
 * Longer than the older-link check's second: here the link is the agent's only
 * one, and a live agent whose event loop stalls (a loaded edge node, a long GC)
 * must not lose it; a killed one's session is still suspended ~3.5 s after the
 * kill instead of ~30 s.
 */
const FLOW_STOP_CHECK_MS = 3000;

/** After GOAWAY too_many_pings, how long the streams in flight get to finish before the connection is destroyed. */
const TOO_MANY_PINGS_GRACE_MS = 1000;

export interface AgentConnectionOptions {
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** Pings more frequent than this are strikes (Go's EnforcementPolicy.MinTime). */
  minPingIntervalMs: number;
  /** HTTP/2 receive window of the whole connection. */
  connectionWindowSize: number;
  /** Every line here is one an agent can provoke on each of its connections: all go through the endpoint's limiter. */
  log: LogLimiter;
}

export function remoteOf(socket: Socket | TLSSocket | undefined): string {
  if (socket === undefined) return 'unknown';
  const { remoteAddress: a, remotePort: p } = socket;
  if (a === undefined) return 'unknown';
  return a.includes(':') ? `[${a}]:${p}` : `${a}:${p}`;
}

export class AgentConnection {
  /** grpc-go's ping enforcement, fed by our writes on this connection. */
  readonly pings: PingPolicy;
  readonly remoteAddress: string;
  /** The agent calls riding on this connection. */
  readonly calls = new Set<ServedCall>();
  private readonly keepalive: Keepalive;
  private closeTimer: NodeJS.Timeout | undefined;
  private readonly flowTimer: NodeJS.Timeout;
  /** Highest stream the agent opened: GOAWAY names it so the calls in flight still finish. */
  private lastStreamID = 0;

  constructor(
    private readonly session: Http2Session,
    private readonly opts: AgentConnectionOptions,
  ) {
    this.pings = new PingPolicy({ minTimeMs: opts.minPingIntervalMs });
    this.remoteAddress = remoteOf(session.socket);
    try {
      session.setLocalWindowSize(opts.connectionWindowSize);
    } catch (err: unknown) {
      opts.log.warn('could not raise the HTTP/2 connection window', { error: errorMessage(err) });
    }
    session.on('ping', () => this.onPing());
    session.on('error', (err) => {
      opts.log.verbose(2, 'agent connection error', { remoteAddress: this.remoteAddress, error: errorMessage(err) });
    });
    session.once('close', () => {
      this.keepalive.stop();
      clearTimeout(this.closeTimer);
      clearInterval(this.flowTimer);
    });
    const timeoutMs = opts.keepaliveTimeoutMs;
    this.keepalive = new Keepalive(session, {
      intervalMs: () => opts.keepaliveTimeMs,
      received: transportBytesRead(session),
      measureEveryMs: ROUND_TRIP_EVERY_INTERVALS * opts.keepaliveTimeMs,
      measureAtStart: true,
      timeoutMs,
      onTimeout: () => {
        opts.log.warn('agent connection did not answer a keepalive ping; closing it', { remoteAddress: this.remoteAddress, timeoutMs });
        this.drop(`no answer to a keepalive ping within ${timeoutMs} ms`);
      },
    });
    this.keepalive.start();
    this.flowTimer = this.watchFlowStopping();
  }

  /**
   * An agent killed (kill -9) mid-flow: the kernel resets its connection at
   * once, but node:http2 does not always read that reset (measured: about
   * half the kills of an agent sending at full speed went unnoticed; the
   * session read and wrote nothing more, its keepalive ping left queued), so
   * keepalive would notice ~30 s later and only then would the resume window
   * start. So a connection whose peer was sending DATA and then fell silent
   * between two looks is asked for a sign of life (answers(), as a
   * reconnected agent's older link is); with none, it is dropped as keepalive
   * would drop it. A live agent that ends a flow costs one ping.
   */
  private watchFlowStopping(): NodeJS.Timeout {
    const heard = transportBytesRead(this.session);
    let last = heard();
    let flowing = false;
    let checking = false;
    const timer = setInterval(() => {
      const now = heard();
      const stopped = flowing && now === last;
      flowing = now - last >= FLOW_BYTES;
      last = now;
      if (!stopped || checking || this.calls.size === 0) return;
      checking = true;
      const timeoutMs = Math.max(FLOW_STOP_CHECK_MS, 4 * (this.roundTripMs ?? 0));
      void this.answers(timeoutMs).then((alive) => {
        checking = false;
        if (alive || this.session.destroyed) return;
        this.opts.log.warn('agent connection fell silent mid-flow and gave no sign of life; closing it', { remoteAddress: this.remoteAddress, timeoutMs });
        this.drop(`no sign of life within ${timeoutMs} ms after the agent fell silent mid-flow`);
      });
    }, FLOW_LOOK_MS);
    timer.unref();
    return timer;
  }

  /** Round trip of the last keepalive ping, for /debug/agents. */
  get roundTripMs(): number | undefined {
    return this.keepalive.lastRoundTripMs;
  }

  /** The smallest round trip measured: what flow control sizes the connections' windows by. */
  get minRoundTripMs(): number | undefined {
    return this.keepalive.minRoundTripMs;
  }

  /**
   * Whether the agent still answers on this connection: a PING goes out, and
   * anything heard within `timeoutMs` proves it (the answer, or any frame: on
   * a busy link the answer may queue behind data).
   */
  answers(timeoutMs: number): Promise<boolean> {
    const session = this.session;
    if (session.destroyed) return Promise.resolve(false);
    const heard = transportBytesRead(session);
    const before = heard();
    return new Promise((resolve) => {
      // After a stalled event loop the timer runs before what arrived meanwhile is read: the next turn decides.
      const timer = setTimeout(() => setImmediate(() => resolve(!session.destroyed && heard() !== before)), timeoutMs);
      timer.unref();
      const answered = (err: Error | null): void => {
        if (err !== null) return;
        clearTimeout(timer);
        resolve(true);
      };
      // Pings already outstanding (keepalive's) make node:http2 refuse one more: the bytes heard decide then.
      if (!session.ping(answered)) this.opts.log.verbose(2, 'liveness ping not sent: pings outstanding', { remoteAddress: this.remoteAddress });
    });
  }

  /** Ends every call on the connection as failed, for `reason`, and destroys it: the agent is gone. */
  drop(reason: string): void {
    for (const call of this.calls) call.abort(reason);
    this.session.destroy();
  }

  /** A stream the agent opened: GOAWAY must let it finish. */
  opened(streamID: number | undefined): void {
    if (streamID !== undefined) this.lastStreamID = Math.max(this.lastStreamID, streamID);
  }

  /**
   * grpc-go's ping policy (pkg/grpc/ping-policy.ts). On too many pings the
   * calls in flight end first, with the reason in their status (a Node client
   * drops its streams the moment it sees a GOAWAY with an error code); then
   * GOAWAY ENHANCE_YOUR_CALM "too_many_pings", once, and a graceful close.
   */
  private onPing(): void {
    const session = this.session;
    if (this.pings.onPing() !== TOO_MANY_PINGS || session.destroyed) return;
    const { minPingIntervalMs } = this.opts;
    const message = `${TOO_MANY_PINGS}: the agent pinged more often than every ${minPingIntervalMs} ms while we sent nothing`;
    this.opts.log.warn('agent pings too often; sending GOAWAY too_many_pings', { remoteAddress: this.remoteAddress, minPingIntervalMs });
    const goaway = (): void => {
      if (session.destroyed || session.closed) return;
      clearTimeout(this.closeTimer);
      session.goaway(http2.constants.NGHTTP2_ENHANCE_YOUR_CALM, this.lastStreamID, Buffer.from(TOO_MANY_PINGS));
      session.close();
      this.closeTimer = setTimeout(() => session.destroy(), TOO_MANY_PINGS_GRACE_MS);
      this.closeTimer.unref();
    };
    const inFlight = [...this.calls];
    let open = inFlight.length;
    if (open === 0) return goaway();
    for (const call of inFlight) {
      call.onceClosed(() => {
        if (--open === 0) goaway();
      });
      call.endFor({ kind: 'cut-off', message }, GrpcStatus.UNAVAILABLE);
    }
    // A peer that never takes its trailers gets the GOAWAY anyway.
    this.closeTimer = setTimeout(goaway, TOO_MANY_PINGS_GRACE_MS);
    this.closeTimer.unref();
  }
}
