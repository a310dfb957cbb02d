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
      const timer = setTimeout(() => resolve(!session.destroyed && heard() !== before), timeoutMs);
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
