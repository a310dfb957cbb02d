// One agent's WebSocket connection to the endpoint: keepalive over ping/pong
// frames (as gRPC keepalive on an HTTP/2 connection, agent-connection.ts) and
// the link riding on it. Its close path stops its timer.

import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import { Keepalive } from '../grpc/keepalive.js';
import { WsPings } from '../grpc/ws-pings.js';
import type { LogLimiter } from '../log/log-limiter.js';
import { remoteOf } from './agent-connection.js';
import type { LinkConnection, ServedCall } from './served-call.js';

/** An agent heard all the time is still pinged every this many keepalive intervals (a recent round trip for /debug/agents). */
const ROUND_TRIP_EVERY_INTERVALS = 6;

export interface WsAgentConnectionOptions {
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  log: LogLimiter;
}

export class WsAgentConnection implements LinkConnection {
  readonly remoteAddress: string;
  readonly calls = new Set<ServedCall>();
  private keepalive: Keepalive | undefined;
  private wsPings: WsPings | undefined;
  private ws: WebSocket | undefined;

  constructor(
    private readonly socket: Socket,
    private readonly opts: WsAgentConnectionOptions,
    remoteAddress = remoteOf(socket),
  ) {
    this.remoteAddress = remoteAddress;
  }

  /** The upgrade completed: keepalive starts, and stops when the WebSocket closes. */
  start(ws: WebSocket): void {
    this.ws = ws;
    this.wsPings = new WsPings(ws);
    const { opts, socket } = this;
    const timeoutMs = opts.keepaliveTimeoutMs;
    this.keepalive = new Keepalive(this.wsPings, {
      intervalMs: () => opts.keepaliveTimeMs,
      received: () => socket.bytesRead,
      measureEveryMs: ROUND_TRIP_EVERY_INTERVALS * opts.keepaliveTimeMs,
      measureAtStart: true,
      timeoutMs,
      onTimeout: () => {
        opts.log.warn('agent WebSocket did not answer a keepalive ping; closing it', { remoteAddress: this.remoteAddress, timeoutMs });
        this.drop(`no answer to a keepalive ping within ${timeoutMs} ms`);
      },
    });
    ws.once('close', () => this.keepalive?.stop());
    this.keepalive.start();
  }

  get roundTripMs(): number | undefined {
    return this.keepalive?.lastRoundTripMs;
  }

  get minRoundTripMs(): number | undefined {
    return this.keepalive?.minRoundTripMs;
  }

  /** A ping goes out; its pong, or anything else heard within `timeoutMs`, proves the agent is there. */
  answers(timeoutMs: number): Promise<boolean> {
    const pings = this.wsPings;
    const socket = this.socket;
    if (pings === undefined || pings.destroyed) return Promise.resolve(false);
    const before = socket.bytesRead;
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(!pings.destroyed && socket.bytesRead !== before), timeoutMs);
      timer.unref();
      pings.ping((err) => {
        if (err !== null) return;
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  drop(reason: string): void {
    for (const call of this.calls) call.abort(reason);
    this.keepalive?.stop();
    this.ws?.terminate();
    this.socket.destroy();
  }
}
