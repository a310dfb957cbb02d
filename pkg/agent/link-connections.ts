// The dials and connections of one server link: a DIAL_REQ is answered
// asynchronously (the agent-wide dial limit, the dialer's allow-list and
// timeout), a connection that opens is joined to its target socket (a
// SocketRelay, endpoint-conn.ts) and kept
// in the link's table by connectID until it ends, a DIAL_CLS cancels its
// dial, and when the link goes every dial and connection goes with it.

import type { Socket } from 'node:net';
import type { Logger } from '../log/logger.js';
import { ConnTable } from '../mux/conn-table.js';
import type { PacketLink } from '../mux/packet-link.js';
import type { PooledReads } from '../mux/pooled-reads.js';
import { errorCode } from '../protocol/errors.js';
import { type AgentDialError } from './errors.js';
import type { FlowWindows } from '../protocol/flow-control.js';
import type { DialRequestPacket, KnownPacket } from '../protocol/packet.js';
import type { DialLimit } from './dial-limit.js';
import type { Dialer } from './dialer.js';
import { EndpointConn } from './endpoint-conn.js';
import type { AgentMetrics } from './metrics.js';

/**
 * Default of connSendHighWaterMark: two socket reads (128 KiB). Whatever the
 * target sends beyond it waits in the kernel's socket buffer rather than in
 * the agent's memory, and is not read at all if the connection closes first.
 * Under churn (bench/agent-memory.ts, since removed; in git) 64 KiB took the peak of live and garbage
 * Buffers from ~44 to ~25 MB against 256 KiB; but at exactly one read every
 * 64 KiB write returns false and the target socket is paused and resumed per
 * read even when the link takes it at once, so one read of slack is left.
 */
export const CONN_SEND_HIGH_WATER_MARK = 128 * 1024;

export interface LinkConnectionsOptions {
  dialer: Dialer;
  /** Dials running at once, shared by every link of the agent. */
  dialLimit: DialLimit;
  connHighWaterMark?: number;
  /** See ServerConnectionOptions.connSendHighWaterMark. */
  connSendHighWaterMark?: number;
  metrics?: AgentMetrics;
  /** Told whenever a connection of this link has closed. */
  onConnectionClosed?: () => void;
  log: Logger;
}

/** What the link agreed with the server, once its call is up. */
export interface LinkTerms {
  link: PacketLink;
  flow: FlowWindows | undefined;
  halfClose: boolean;
}

export class LinkConnections {
  private readonly conns = new ConnTable<EndpointConn>();
  private readonly dials = new Map<bigint, AbortController>();
  private nextConnectID = 1n;
  private terms: LinkTerms | undefined;
  private closed = false;

  constructor(
    private readonly opts: LinkConnectionsOptions,
    /** Sends a control packet on the link (dropped while it is not up). */
    private readonly send: (p: KnownPacket) => void,
  ) {}

  /** The link is up: connections are made on it with these terms. */
  linkUp(terms: LinkTerms): void {
    this.terms = terms;
  }

  get size(): number {
    return this.conns.size;
  }

  get pendingDialCount(): number {
    return this.dials.size;
  }

  get(connectID: bigint): EndpointConn | undefined {
    return this.conns.get(connectID);
  }

  isTombstoned(connectID: bigint): boolean {
    return this.conns.isTombstoned(connectID);
  }

  sweep(): void {
    this.conns.sweep();
  }

  /** The open connections, for /debug/connections. */
  list(): { connectID: string; address: string; openedSince: string; bytesToDestination: number; bytesFromDestination: number }[] {
    return this.conns.oldestFirst().map((c) => ({
      connectID: String(c.connectID),
      address: c.address,
      openedSince: new Date(c.openedAt).toISOString(),
      bytesToDestination: c.bytesReceived,
      bytesFromDestination: c.bytesSent,
    }));
  }

  /** The server gave up on a dial (DIAL_CLS). */
  cancel(random: bigint): void {
    const dial = this.dials.get(random);
    if (dial === undefined) return;
    this.opts.log.verbose(3, 'server cancelled a dial', { dialID: random.toString() });
    dial.abort();
  }

  /** Answers a DIAL_REQ: DIAL_RSP with a connectID once the target is connected, or with the error. */
  dial(p: DialRequestPacket): void {
    const { random, address } = p;
    const log = this.opts.log;
    const fail = (error: string): void => {
      log.verbose(1, 'dial failed', { dialID: random.toString(), dialAddress: address, error });
      this.send({ type: 'DIAL_RSP', random, connectID: 0n, error });
    };
    if (p.protocol !== 'tcp' && p.protocol !== '') {
      fail(`dial ${p.protocol} ${address}: unsupported protocol; only tcp is supported`);
      return;
    }
    if (this.dials.has(random)) {
      fail(`dial ${address}: dial ID ${random} is already in progress`);
      return;
    }
    const limit = this.opts.dialLimit;
    if (!limit.tryTake()) {
      fail(`dial ${address}: this agent already runs ${limit.max} dials (--max-concurrent-dials); try again later`);
      return;
    }
    const cancel = new AbortController();
    this.dials.set(random, cancel);
    const started = performance.now();
    this.opts.dialer.dialThen(
      address,
      cancel.signal,
      ({ socket, reads }) => {
        this.dials.delete(random);
        limit.release();
        if (cancel.signal.aborted || this.closed || this.terms === undefined) {
          socket.destroy();
          return;
        }
        const connectID = this.nextConnectID++;
        // DIAL_RSP goes out before any DATA of this connection, and before the bookkeeping: the server's client waits for it.
        this.send({ type: 'DIAL_RSP', random, connectID, error: '' });
        // HTTP/2 writes what is sent outside its own read callbacks from a native
        // immediate, which runs before the JS ones: building the connection in an
        // immediate puts DIAL_RSP on the wire first. Nothing of this connection
        // can be read (from the link or the target) before it runs: no poll comes between.
        setImmediate(() => {
          this.connected(random, connectID, address, socket, reads);
          this.opts.metrics?.dialSucceeded((performance.now() - started) / 1000);
        });
      },
      (err: AgentDialError) => {
        this.dials.delete(random);
        limit.release();
        this.opts.metrics?.dialFailed(errorCode(err));
        // A cancelled dial needs no answer: the server has forgotten it.
        if (cancel.signal.aborted || this.closed) return;
        fail(err.message);
      },
    );
  }

  private connected(random: bigint, connectID: bigint, address: string, socket: Socket, reads: PooledReads): void {
    const terms = this.terms;
    // The link went down since DIAL_RSP was sent: closeAll() did not see this connection.
    if (this.closed || terms === undefined) {
      socket.destroy();
      return;
    }
    const log = this.opts.log;
    const conn = new EndpointConn(terms.link, connectID, address, {
      highWaterMark: this.opts.connHighWaterMark,
      sendHighWaterMark: this.opts.connSendHighWaterMark ?? CONN_SEND_HIGH_WATER_MARK,
      flow: terms.flow,
      halfClose: terms.halfClose,
    });
    this.conns.add(conn);
    conn.onClose = (err) => {
      this.conns.remove(conn);
      // The access line: one per tunnelled connection, when it ends.
      if (log.enabled(2)) {
        log.verbose(2, 'connection ended', {
          connectID: connectID.toString(),
          dialAddress: address,
          bytesToDestination: conn.bytesReceived,
          bytesFromDestination: conn.bytesSent,
          durationMs: Date.now() - conn.openedAt,
          ended: err === undefined ? 'closed' : (errorCode(err) ?? 'error'),
          ...(err !== undefined ? { error: err.message } : {}),
        });
      }
      this.opts.onConnectionClosed?.();
    };
    if (log.enabled(3)) {
      log.verbose(3, 'connection established', { dialID: random.toString(), connectID: connectID.toString(), dialAddress: address });
    }
    conn.attach(socket, [], reads);
  }

  /** The link is gone: every dial is cancelled, and every connection fails (its target is reset). */
  closeAll(err: Error): void {
    this.closed = true;
    for (const d of [...this.dials.values()]) d.abort();
    this.dials.clear();
    for (const c of this.conns.takeAll()) c.destroy(err);
  }
}
