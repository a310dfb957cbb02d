// Dials what the server asks for: resolve, check the allow-list against the
// resolved address (so a name cannot smuggle in a forbidden IP), connect with a
// deadline. Failure messages use Go's wording, which servers classify.

import { addAbortListener } from 'node:events';
import { lookup } from 'node:dns/promises';
import { isIP, Socket, type SocketConstructorOpts } from 'node:net';
import { deniedByPolicyMessage, timeoutMessage } from '../protocol/dial-errors.js';
import { PooledReads } from '../mux/pooled-reads.js';
import { splitHostPort } from '../net/host-port.js';
import { AgentDialError } from './errors.js';
import { errorCode, errorMessage } from '../protocol/errors.js';
import type { AllowList } from './allow-list.js';

export interface DialerOptions {
  allowList: AllowList;
  /** Default 5 s, as upstream agents. */
  timeoutMs?: number;
}

const ERRNO_TEXT: Record<string, string> = {
  ECONNREFUSED: 'connect: connection refused',
  ECONNRESET: 'connect: connection reset by peer',
  EHOSTUNREACH: 'connect: no route to host',
  ENETUNREACH: 'connect: network is unreachable',
  EADDRNOTAVAIL: 'connect: cannot assign requested address',
  EACCES: 'connect: permission denied',
  EMFILE: 'socket: too many open files',
  ENFILE: 'socket: too many open files in system',
};

/** A connected target: its socket, whose reads come through `reads` (it emits no 'data'). */
export interface DialedTarget {
  socket: Socket;
  reads: PooledReads;
}

/**
 * A target socket not yet connected, reading into pooled slabs (pooled-reads.ts).
 * Half-open: a target's EOF ends one direction only; the tunnel carries it as a half-close.
 */
function newTargetSocket(): DialedTarget {
  const reads = new PooledReads();
  // net.connect() passes the same options to the constructor, where `onread` and `noDelay` are read.
  const opts = { allowHalfOpen: true, noDelay: true, onread: reads.onread } as SocketConstructorOpts;
  return { socket: new Socket(opts), reads };
}

export class Dialer {
  private readonly allowList: AllowList;
  readonly timeoutMs: number;
  /**
   * The socket object of the next dial, made ahead: constructing a net.Socket
   * (its stream states) took ~20 of the ~25-35 µs between a DIAL_REQ and its
   * connect(2) in the agent. It holds no handle, so no descriptor, until it connects.
   */
  private spare: DialedTarget | undefined;
  private refillScheduled = false;

  constructor(opts: DialerOptions) {
    this.allowList = opts.allowList;
    this.timeoutMs = opts.timeoutMs ?? 5000;
  }

  /** Connects to `address`; rejects with an AgentDialError whose message is fit for DIAL_RSP. */
  dial(address: string, signal?: AbortSignal): Promise<DialedTarget> {
    return new Promise((resolve, reject) => this.dialThen(address, signal, resolve, reject));
  }

  /**
   * As dial(), with callbacks: `connected` runs in the socket's 'connect'
   * event (an IP literal needs no lookup, so no promise hop either way).
   * Exactly one of the two is called, perhaps before this returns.
   */
  dialThen(address: string, signal: AbortSignal | undefined, connected: (target: DialedTarget) => void, failed: (err: AgentDialError) => void): void {
    const deadline = Date.now() + this.timeoutMs;
    const target = splitHostPort(address);
    if (target === undefined) return failed(new AgentDialError('YT_ERR_BAD_ADDRESS', `dial tcp ${address}: address is not host:port`));
    if (isIP(target.host) !== 0) return this.connect(address, target.host, target.port, deadline, signal, connected, failed);
    lookup(target.host).then(
      ({ address: ip }) => this.connect(address, ip, target.port, deadline, signal, connected, failed),
      (err: unknown) => {
        const code = errorCode(err) ?? 'EAI_FAIL';
        const why = code === 'ENOTFOUND' ? 'no such host' : errorMessage(err);
        failed(new AgentDialError(code, `dial tcp: lookup ${target.host}: ${why}`, { cause: err }));
      },
    );
  }

  /** Connects to `ip` if the allow-list lets it and the dial is still wanted. */
  private connect(
    address: string,
    ip: string,
    port: number,
    deadline: number,
    signal: AbortSignal | undefined,
    resolve: (target: DialedTarget) => void,
    reject: (err: AgentDialError) => void,
  ): void {
    if (!this.allowList.allows(ip, port)) {
      return reject(new AgentDialError('YT_ERR_DIAL_DENIED', deniedByPolicyMessage(address, this.allowList.description)));
    }
    if (signal?.aborted === true) return reject(new AgentDialError('YT_ERR_DIAL_CANCELLED', `dial tcp ${address}: operation was canceled`));
    const timeoutMs = Math.max(1, deadline - Date.now());
    const target = this.spare ?? newTargetSocket();
    this.spare = undefined;
    const { socket, reads } = target;
    socket.connect({ host: ip, port });
    reads.bind(socket);
    const done = (err?: AgentDialError): void => {
      clearTimeout(timer);
      cancelled?.[Symbol.dispose]();
      socket.off('connect', onConnect);
      socket.off('error', onError);
      if (err === undefined) {
        resolve(target);
      } else {
        socket.destroy();
        reject(err);
      }
      this.scheduleRefill();
    };
    const onConnect = (): void => done();
    const onError = (err: NodeJS.ErrnoException): void => {
      const text = (err.code !== undefined && ERRNO_TEXT[err.code]) || err.message;
      done(new AgentDialError(err.code ?? 'YT_ERR_DIAL_FAILED', `dial tcp ${address}: ${text}`, { cause: err }));
    };
    const onCancel = (): void => done(new AgentDialError('YT_ERR_DIAL_CANCELLED', `dial tcp ${address}: operation was canceled`));
    const timer = setTimeout(() => done(new AgentDialError('YT_ERR_DIAL_TIMEOUT', timeoutMessage(address, this.timeoutMs))), timeoutMs);
    timer.unref();
    socket.once('connect', onConnect);
    socket.once('error', onError);
    const cancelled = signal === undefined ? undefined : addAbortListener(signal, onCancel);
  }

  /**
   * Makes the next spare socket in an immediate: after whatever the dial's
   * callback sent (HTTP/2 writes it from a native immediate, which runs first).
   */
  private scheduleRefill(): void {
    if (this.spare !== undefined || this.refillScheduled) return;
    this.refillScheduled = true;
    setImmediate(this.refill);
  }

  private readonly refill = (): void => {
    this.refillScheduled = false;
    this.spare ??= newTargetSocket();
  };
}
