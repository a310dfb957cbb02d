// One `ProxyService/Proxy` stream, as konnectivity-client (kube-apiserver's
// egress selector) uses it: DIAL_REQ → DIAL_RSP, then DATA both ways on the
// one connection, and CLOSE_REQ → CLOSE_RSP. When the far end closes first,
// CLOSE_RSP goes out unasked: kube-apiserver waits for it and would otherwise
// keep the stream (and the kubelet connection) open forever.
//
// A connection cut by a failure (the agent gone, the target reset) is not a
// finished one: its CLOSE_RSP carries the error and the stream ends with
// UNAVAILABLE. (konnectivity-client turns both into EOF for its reader; other
// clients can tell.) A client whose stream ends without CLOSE_REQ gave up
// abruptly: the target is reset.

import type { Logger } from '../log/logger.js';
import { GrpcStatus } from '../grpc/status.js';
import type { ServerPacketCall } from '../grpc/server-call.js';
import { ConnectionClosedError, DialError, errorMessage } from '../protocol/errors.js';
import { unhandledPacketType, type DialRequestPacket, type Packet } from '../protocol/packet.js';
import { removePortFromHost } from '../protocol/identifiers.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { dialFailureReason, type NodeNameOf } from './dial-reason.js';
import type { Duplex } from 'node:stream';
import { abortStream } from '../mux/abort.js';
import type { DirectDialer } from './direct-dial.js';
import { holdable, writeHolding } from '../mux/buffer-pool.js';

/** A stream that sends no DIAL_REQ within this long is ended: it only holds resources. */
export const DIAL_REQUEST_TIMEOUT_MS = 30_000;

export interface EgressStreamOptions {
  tunnel: Tunnel;
  /** Default DIAL_REQUEST_TIMEOUT_MS. */
  dialRequestTimeoutMs?: number;
  /** The node an address belongs to, so that a failed dial names it. */
  nodeNameOf?: NodeNameOf;
  /** Dials what the tunnel does not reach (--egress-direct-dial). */
  direct?: DirectDialer;
  logger: Logger;
}

/** The stream's one connection: tunnelled (through `agentID`) or dialled directly (`agentID` undefined). */
interface StreamConn {
  socket: Duplex;
  connectID: bigint;
  address: string;
  agentID: string | undefined;
}

type State = 'awaiting-dial' | 'dialing' | 'open' | 'closed';

/** How a stream ends; close() takes one and does what it asks after the common steps. */
type Ending =
  /** The client broke the protocol or took too long: the stream ends with `code`. */
  | { kind: 'refused'; code: number; message: string }
  /** The dial failed: DIAL_RSP carries the reason, and the stream ends OK. */
  | { kind: 'dial-failed'; req: DialRequestPacket; reason: string }
  /** The connection ended (asked for or not): CLOSE_RSP, with `error` for a failure. */
  | { kind: 'closed'; why: string; error: string }
  /** The client's stream ended without CLOSE_REQ: the target is reset. */
  | { kind: 'client-gone'; reason: string };

export class EgressStream {
  private state: State = 'awaiting-dial';
  private conn: StreamConn | undefined;
  private readonly abort = new AbortController();
  private readonly log: Logger;
  private readonly started = performance.now();
  private bytesIn = 0;
  private bytesOut = 0;
  private dialRequestTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly call: ServerPacketCall,
    private readonly opts: EgressStreamOptions,
  ) {
    this.log = opts.logger;
  }

  /** The stream ended (a getter, so that checks after an await are not narrowed away). */
  private get closed(): boolean {
    return this.state === 'closed';
  }

  start(): void {
    this.call.start({ onPacket: (p) => this.onPacket(p), onClose: (reason) => this.onCallClosed(reason) });
    const timeoutMs = this.opts.dialRequestTimeoutMs ?? DIAL_REQUEST_TIMEOUT_MS;
    this.dialRequestTimer = setTimeout(() => {
      if (this.state === 'awaiting-dial')
        this.close({ kind: 'refused', code: GrpcStatus.DEADLINE_EXCEEDED, message: `no DIAL_REQ within ${timeoutMs} ms of the stream opening` });
    }, timeoutMs);
    this.dialRequestTimer.unref();
  }

  private onPacket(p: Packet): void {
    const type = p.type;
    switch (type) {
      case 'DIAL_REQ':
        if (this.state !== 'awaiting-dial') {
          this.close({ kind: 'refused', code: GrpcStatus.INVALID_ARGUMENT, message: 'a second DIAL_REQ on one stream; each stream carries one connection' });
          return;
        }
        void this.dial(p);
        return;
      case 'DATA':
        if (this.state !== 'open' || this.conn === undefined || p.connectID !== this.conn.connectID) {
          this.close({ kind: 'refused', code: GrpcStatus.INVALID_ARGUMENT, message: `DATA for connectID ${p.connectID} which this stream does not carry` });
          return;
        }
        this.bytesOut += p.data.length;
        // A view of a pooled slab (a joined message) is the call's only while its packet is handled;
        // what is written waits in the connection and the link (until the agent acknowledges it): a small view is copied.
        if (!writeHolding(this.conn.socket, holdable(p.data))) {
          this.call.pauseReceive(this);
          this.conn.socket.once('drain', () => this.call.resumeReceive(this));
        }
        return;
      case 'CLOSE_REQ':
        if (this.conn !== undefined && p.connectID !== this.conn.connectID) {
          this.close({
            kind: 'refused',
            code: GrpcStatus.INVALID_ARGUMENT,
            message: `CLOSE_REQ for connectID ${p.connectID} which this stream does not carry`,
          });
          return;
        }
        this.close({ kind: 'closed', why: 'the client asked (CLOSE_REQ)', error: '' });
        return;
      case 'DIAL_CLS':
        this.abort.abort();
        return;
      case 'DIAL_RSP':
      case 'CLOSE_RSP':
      case 'DRAIN':
      case 'WINDOW_UPDATE':
      case 'CLOSE_WRITE':
      case 'UNKNOWN':
        this.log.verbose(2, 'egress stream: ignoring a packet a client does not send', { packetType: type });
        return;
      default:
        this.log.warn('egress stream: ignoring a packet of a type the server does not know', { packetType: unhandledPacketType(type) });
    }
  }

  private async dial(req: DialRequestPacket): Promise<void> {
    this.state = 'dialing';
    clearTimeout(this.dialRequestTimer);
    if (req.protocol !== 'tcp') {
      this.close({ kind: 'dial-failed', req, reason: `protocol ${JSON.stringify(req.protocol)} is not supported; only tcp` });
      return;
    }
    let conn: StreamConn;
    try {
      conn = await this.connect(req.address);
    } catch (err: unknown) {
      if (this.closed) return;
      const reason = dialFailureReason(err, removePortFromHost(req.address), this.opts.nodeNameOf);
      this.log.warn('egress dial failed', { dialAddress: req.address, reason: err instanceof DialError ? err.code : 'unknown', error: reason });
      this.close({ kind: 'dial-failed', req, reason });
      return;
    }
    const socket = conn.socket;
    if (this.closed) {
      socket.destroy();
      return;
    }
    this.conn = conn;
    this.state = 'open';
    this.call.sendControl({ type: 'DIAL_RSP', random: req.random, connectID: conn.connectID, error: '' });
    this.log.verbose(2, 'egress connection open', { dialAddress: req.address, agentID: conn.agentID ?? 'none (direct)', connectID: String(conn.connectID) });
    socket.on('data', (chunk: Buffer) => {
      this.bytesIn += chunk.length;
      socket.pause();
      this.call.sendData(conn.connectID, chunk, (err) => {
        // The client's stream is gone (a failure, not an end): the target is reset.
        if (err) socket.destroy(err);
        else socket.resume();
      });
    });
    socket.once('end', () => this.close({ kind: 'closed', why: 'the far end closed', error: '' }));
    socket.on('error', (err: Error) => this.close({ kind: 'closed', why: 'the connection failed', error: errorMessage(err) }));
    socket.once('close', () => this.close({ kind: 'closed', why: 'the connection closed', error: socket.readableEnded ? '' : 'closed before its end' }));
  }

  /** The connection to `address`: dialled directly when the direct dialer takes it, else through the tunnel. */
  private async connect(address: string): Promise<StreamConn> {
    const direct = this.opts.direct;
    if (direct?.takes(address) === true) {
      const socket = await new Promise<Duplex>((resolve, reject) => direct.dial(address, this.abort.signal, resolve, reject));
      return { socket, connectID: direct.connectID(), address, agentID: undefined };
    }
    const conn = await this.opts.tunnel.dial(address, { signal: this.abort.signal });
    return { socket: conn, connectID: conn.connectID, address: conn.address, agentID: conn.agentID };
  }

  /**
   * The one close path: the stream is closed once, its timer cleared and its
   * dial abandoned; then what `end` asks (answer the dial, CLOSE_RSP, a status,
   * a reset of the target).
   */
  private close(end: Ending): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    clearTimeout(this.dialRequestTimer);
    this.abort.abort();
    const conn = this.conn;
    switch (end.kind) {
      case 'refused':
        this.log.warn('egress stream ended', { error: end.message });
        conn?.socket.destroy();
        this.call.end(end.code, end.message);
        return;
      case 'dial-failed':
        this.call.sendControl({ type: 'DIAL_RSP', random: end.req.random, connectID: 0n, error: end.reason });
        this.call.end(GrpcStatus.OK, '', `dial failed: ${end.reason}`);
        return;
      case 'closed':
        this.connectionClosed(end.why, end.error);
        return;
      case 'client-gone':
        // No CLOSE_REQ came first: the client went away abruptly, and the target is reset.
        if (conn !== undefined) abortStream(conn.socket, new ConnectionClosedError(`the egress client's stream ended without CLOSE_REQ: ${end.reason}`));
        this.log.verbose(2, 'egress stream ended by the client', { reason: end.reason });
        return;
    }
  }

  /** Ends the connection and the stream, answering CLOSE_RSP (asked for or not); an `error` is a failure. */
  private connectionClosed(why: string, error: string): void {
    const conn = this.conn;
    if (conn !== undefined) {
      conn.socket.destroy();
      this.call.sendControl({ type: 'CLOSE_RSP', connectID: conn.connectID, error });
      this.log.verbose(2, 'egress connection closed', {
        agentID: conn.agentID ?? 'none (direct)',
        dialAddress: conn.address,
        connectID: String(conn.connectID),
        why,
        ...(error !== '' ? { error } : {}),
        bytesToNode: this.bytesOut,
        bytesFromNode: this.bytesIn,
        durationMs: Math.round(performance.now() - this.started),
      });
    }
    if (error === '') this.call.end(GrpcStatus.OK, '', why);
    else
      this.call.end(
        GrpcStatus.UNAVAILABLE,
        `${conn === undefined ? 'connection' : `connection to ${conn.address} ${conn.agentID === undefined ? 'dialled directly' : `through agent ${conn.agentID}`}`} failed: ${error}`,
      );
  }

  private onCallClosed(reason: string): void {
    this.close({ kind: 'client-gone', reason });
  }
}
