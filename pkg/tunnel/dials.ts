// A dial from DIAL_REQ to an established connection, once the tunnel has
// picked the agent stream: the dial waits in the pending table with its
// deadline and cancel listener (pending-dials.ts: `take` is the one way out,
// so one caller settles it), fails with a reason counted in the metrics, or
// on the agent's DIAL_RSP becomes a TunnelConn or a TunnelRelay in its
// backend's connection table, counted and logged again when it ends.

import { addAbortListener } from 'node:events';
import type { Logger } from '../log/logger.js';
import { classifyAgentDialError } from '../protocol/dial-errors.js';
import { AgentLostError, ConnectionClosedError, DialError, type DialFailureReason } from '../protocol/errors.js';
import type { AgentLinkEnd } from './agent-link.js';
import type { Backend } from './backend.js';
import { recordConnectionEnd } from './connection-end.js';
import type { TunnelMetrics } from './metrics.js';
import { PendingDials, type PendingDial } from './pending-dials.js';
import { TunnelConn } from './tunnel-conn.js';
import { TunnelRelay } from './tunnel-relay.js';

export interface DialsOptions {
  metrics: TunnelMetrics;
  log: Logger;
  newDialID: () => bigint;
  /** What each connection is made with. */
  conn: { highWaterMark: number | undefined; lingerAfterEndMs: number; stallTimeoutMs: number };
  /** A dial or a connection is over: whoever waits for idle looks again. */
  onSettled(): void;
  /** A DIAL_RSP for no dial of that agent stream (late, or another's), beyond the late answers it is owed. */
  onUnknownAnswer(backend: Backend, ids: Record<string, string>): void;
}

/** Who asked for a dial: the promise of Tunnel.dial(). */
export interface DialCaller {
  relay: boolean;
  resolve(conn: TunnelConn | TunnelRelay): void;
  reject(err: Error): void;
}

export class Dials {
  private readonly pending = new PendingDials();

  constructor(private readonly opts: DialsOptions) {}

  get size(): number {
    return this.pending.size;
  }

  /** Sends DIAL_REQ for `address` to `backend`; the dial fails after `timeoutMs`, or once `signal` aborts. */
  send(backend: Backend, address: string, timeoutMs: number, signal: AbortSignal | undefined, caller: DialCaller): void {
    let random = this.opts.newDialID();
    while (this.pending.has(random)) random = this.opts.newDialID();
    const dial: PendingDial = { random, backend, address, startedAt: performance.now(), ...caller };
    dial.timer = setTimeout(() => {
      this.fail(random, 'YT_ERR_DIAL_TIMEOUT', `agent ${backend.agentID} did not answer the dial to ${address} within ${timeoutMs} ms`, true);
    }, timeoutMs);
    dial.timer.unref();
    if (signal !== undefined) {
      dial.abortListener = addAbortListener(signal, () => {
        this.fail(random, 'YT_ERR_DIAL_CANCELLED', `dial to ${address} was cancelled by the caller`, true);
      });
    }
    this.pending.add(dial);
    if (this.opts.log.enabled(3)) {
      this.opts.log.verbose(3, 'dialing', { agentID: backend.agentID, dialAddress: address, dialID: random.toString() });
    }
    this.request(dial);
  }

  private request(dial: PendingDial): void {
    const { backend, address, random } = dial;
    if (!backend.send({ type: 'DIAL_REQ', protocol: 'tcp', address, random })) {
      this.fail(random, 'YT_ERR_AGENT_GONE', `agent ${backend.agentID} disconnected before the dial to ${address} could be sent`, false);
    }
  }

  /** Fails a pending dial, if it is still pending; optionally tells the agent with DIAL_CLS. */
  fail(random: bigint, code: DialFailureReason, message: string, tellAgent: boolean): void {
    const dial = this.pending.take(random);
    if (dial === undefined) return;
    if (tellAgent && !dial.backend.closed) {
      dial.backend.send({ type: 'DIAL_CLS', random });
      dial.backend.unknownPackets.dialAbandoned();
    }
    this.failPending(dial, code, message, code === 'YT_ERR_DIAL_CANCELLED' ? 3 : 1);
  }

  /**
   * Settles a dial taken from the pending table as failed: counted by reason,
   * logged at `verbosity` (none: the caller logs the whole batch), rejected.
   */
  private failPending(dial: PendingDial, code: DialFailureReason, message: string, verbosity?: number, fields: Record<string, unknown> = {}): void {
    const where = { agentID: dial.backend.agentID, dialAddress: dial.address, dialID: dial.random.toString() };
    dial.reject(this.failure(code, message, verbosity, { ...where, ...fields }));
    this.opts.onSettled();
  }

  /** A dial that produced no connection: the metric, the log line, the error for its caller. */
  failure(code: DialFailureReason, message: string, verbosity: number | undefined, fields: Record<string, unknown>): DialError {
    this.opts.metrics.dialFailed(code);
    if (verbosity !== undefined) this.opts.log.verbose(verbosity, 'dial failed', { reason: code, error: message, ...fields });
    return new DialError(code, message);
  }

  /** The agent cancelled a dial it was asked for (DIAL_CLS). */
  cancelledByAgent(backend: Backend, random: bigint): void {
    const dial = this.pending.get(random);
    if (dial === undefined || dial.backend !== backend) return;
    this.fail(random, 'YT_ERR_DIAL_FAILED', `agent ${backend.agentID} cancelled the dial to ${dial.address}`, false);
  }

  /** The agent's DIAL_RSP: the connection, or the dial's failure. */
  answered(backend: Backend, random: bigint, connectID: bigint, error: string): void {
    const dial = this.pending.get(random);
    if (dial === undefined || dial.backend !== backend) {
      // Late (timed out, cancelled) or foreign: do not leave the agent holding a connection.
      if (connectID !== 0n) backend.send({ type: 'CLOSE_REQ', connectID });
      if (!backend.unknownPackets.takeLateAnswer()) this.opts.onUnknownAnswer(backend, { dialID: random.toString(), connectID: connectID.toString() });
      return;
    }
    this.pending.take(random);
    if (error !== '' || connectID === 0n) {
      const reason = error === '' ? 'YT_ERR_DIAL_FAILED' : classifyAgentDialError(error);
      const verb = reason === 'YT_ERR_DIAL_DENIED' ? 'refused to dial' : 'could not dial';
      const message = `agent ${backend.agentID} ${verb} ${dial.address}: ${error === '' ? 'answered without a connection ID' : error}`;
      this.failPending(dial, reason, message, 1, { error });
      return;
    }
    const conn = this.connect(backend, connectID, dial);
    backend.conns.add(conn);
    // The caller answers its client first; the bookkeeping can wait that long.
    dial.resolve(conn);
    this.opts.metrics.dialSucceeded((performance.now() - dial.startedAt) / 1000);
    if (this.opts.log.enabled(3)) {
      this.opts.log.verbose(3, 'connection established', {
        agentID: backend.agentID,
        dialAddress: dial.address,
        dialID: random.toString(),
        connectID: connectID.toString(),
      });
    }
  }

  private connect(backend: Backend, connectID: bigint, dial: PendingDial): TunnelConn | TunnelRelay {
    const c = this.opts.conn;
    const connOpts = {
      highWaterMark: c.highWaterMark,
      flow: backend.flow,
      halfClose: backend.halfClose,
      lingerAfterEndMs: c.lingerAfterEndMs,
      stallTimeoutMs: c.stallTimeoutMs,
    };
    if (dial.relay) {
      const relay = new TunnelRelay(backend, connectID, dial.address, connOpts);
      relay.onClose = (err) => this.connectionClosed(backend, relay, err ?? null);
      return relay;
    }
    const duplex = new TunnelConn(backend, connectID, dial.address, connOpts);
    duplex.once('close', () => this.connectionClosed(backend, duplex, duplex.errored));
    return duplex;
  }

  /** A connection is over: out of the table, counted and logged. */
  private connectionClosed(backend: Backend, conn: TunnelConn | TunnelRelay, err: Error | null): void {
    backend.conns.remove(conn);
    backend.endedBytes.toAgent += conn.bytesSent;
    backend.endedBytes.fromAgent += conn.bytesReceived;
    this.opts.onSettled();
    recordConnectionEnd(conn, err, this.opts.metrics, this.opts.log);
  }

  /** `backend`'s link is over: its dials fail and its connections close, with AgentLostError when it was `lost`. Returns how many of each. */
  endAllOf(backend: Backend, end: AgentLinkEnd): { dials: number; conns: number } {
    const reason = end.message;
    const lost = end.kind === 'lost';
    const dials = this.pending.takeAllFor(backend);
    for (const d of dials) {
      if (lost) this.failPending(d, 'YT_ERR_AGENT_LOST', `dial to ${d.address} failed: ${reason}`);
      else this.failPending(d, 'YT_ERR_AGENT_GONE', `agent ${backend.agentID} disconnected while dialing ${d.address}: ${reason}`);
    }
    const conns = backend.conns.takeAll();
    for (const c of conns) c.remoteClose(lost ? new AgentLostError(reason) : new ConnectionClosedError(`agent ${backend.agentID} disconnected: ${reason}`));
    return { dials: dials.length, conns: conns.length };
  }

  /** Takes the dials waiting on `from` for `to` (the same node's new process), deadlines unchanged; `resend` asks `to` for them. */
  moveAll(from: Backend, to: Backend): { resend(): number } {
    const dials = this.pending.moveAll(from, to);
    return {
      resend: () => {
        for (const d of dials) this.request(d);
        return dials.length;
      },
    };
  }

  /** The tunnel is closing: every dial fails. */
  failAll(): void {
    for (const d of this.pending.takeAll()) {
      this.failPending(d, 'YT_ERR_TUNNEL_CLOSED', `tunnel server is shutting down; the dial to ${d.address} was abandoned`);
    }
  }
}
