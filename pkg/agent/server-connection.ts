// One agent ↔ server link: its own gRPC channel (own TCP/TLS connection) and
// one `AgentService/Connect` call. It answers the server's dials and carries
// the connections made through it.

import * as grpc from '@grpc/grpc-js';
import { isIP } from 'node:net';
import { checkServerIdentity } from 'node:tls';
import type { Logger } from '../log/logger.js';
import { silentLogger } from '../log/logger.js';
import { ConnTable } from '../mux/conn-table.js';
import { splice } from '../mux/splice.js';
import { decodePacket, encodePacket } from '../protocol/codec.js';
import { errorMessage } from '../protocol/errors.js';
import { CONN_WINDOW_HEADER, DEFAULT_CONN_WINDOW, parseConnWindow, type FlowWindows } from '../protocol/flow-control.js';
import { describePacket, type DialRequestPacket, type KnownPacket, type Packet } from '../protocol/packet.js';
import { splitHostPort, type Dialer } from './dialer.js';
import { EndpointConn } from './endpoint-conn.js';
import { ServerCall, type ConnectCall } from './server-call.js';
import { probeTLS } from './tls-probe.js';

export const AGENT_CONNECT_PATH = '/AgentService/Connect';

/** SNI sent when the server is addressed by IP (servers select no certificate by it). */
const IP_TARGET_SNI = 'yurt-tunnel-server';

export interface AgentTLS {
  /** CA bundle that signs the server's certificate. */
  ca: string;
  cert: string;
  key: string;
}

export interface ServerConnectionOptions {
  /** host:port of the server's agent endpoint. */
  address: string;
  /** Name to verify in the server's certificate; default the host of `address`. */
  serverName?: string;
  tls: AgentTLS;
  agentID: string;
  /** The `agentidentifiers` metadata value. */
  identifiers: string;
  dialer: Dialer;
  /** Keepalive ping interval. Default 35 s: Go servers forbid pings more often than every 30 s. */
  keepaliveTimeMs?: number;
  /** How long a ping may go unanswered. Default 20 s. */
  keepaliveTimeoutMs?: number;
  /** How long to wait for the server's response headers. Default 30 s. */
  handshakeTimeoutMs?: number;
  /** HTTP/2 receive window. Default 4 MiB. */
  receiveWindow?: number;
  /**
   * Receive window per connection announced to the server for yurt-tunnel
   * flow control; 0 does not announce it (upstream behaviour). Default 512 KiB.
   */
  connWindow?: number;
  connHighWaterMark?: number;
  logger?: Logger;
}

/** The server's identity, from its response headers. */
export interface ServerIdentity {
  serverID: string;
  serverCount: number;
  /** Per-connection flow control, when the server agreed to it. */
  flow: FlowWindows | undefined;
}

export class ServerConnectionError extends Error {
  override readonly name = 'ServerConnectionError';
  constructor(
    readonly code: 'YT_ERR_CONNECT_FAILED' | 'YT_ERR_BAD_HEADERS' | 'YT_ERR_HANDSHAKE_TIMEOUT' | 'YT_ERR_CLOSED',
    message: string,
  ) {
    super(message);
  }
}

function singleHeader(md: grpc.Metadata, name: string): string | undefined {
  const values = md.get(name);
  if (values.length !== 1) return undefined;
  return String(values[0]);
}

export class ServerConnection {
  readonly address: string;
  identity: ServerIdentity | undefined;
  private readonly opts: ServerConnectionOptions;
  private readonly log: Logger;
  private readonly client: grpc.Client;
  private call: ConnectCall | undefined;
  private link: ServerCall | undefined;
  private readonly conns = new ConnTable<EndpointConn>();
  private readonly dials = new Map<bigint, AbortController>();
  private nextConnectID = 1n;
  private closedReason: string | undefined;
  private readonly closeWaiters: Array<(reason: string) => void> = [];
  private sweepTimer: NodeJS.Timeout | undefined;
  private readonly verifyName: string;

  constructor(opts: ServerConnectionOptions) {
    this.opts = opts;
    this.address = opts.address;
    this.log = (opts.logger ?? silentLogger()).child({ server: opts.address });
    // The server certificate is checked against serverName, or the address's host (an IP SAN for an IP).
    const verifyName = opts.serverName ?? splitHostPort(opts.address)?.host ?? opts.address;
    this.verifyName = verifyName;
    const creds = grpc.credentials.createSsl(Buffer.from(opts.tls.ca), Buffer.from(opts.tls.key), Buffer.from(opts.tls.cert), {
      checkServerIdentity: (_name, cert) => checkServerIdentity(verifyName, cert),
    });
    const channelOptions: grpc.ChannelOptions = {
      'grpc.keepalive_time_ms': opts.keepaliveTimeMs ?? 35_000,
      'grpc.keepalive_timeout_ms': opts.keepaliveTimeoutMs ?? 20_000,
      'grpc.keepalive_permit_without_calls': 1,
      // Each server connection is its own TCP connection, even to the same address.
      'grpc.use_local_subchannel_pool': 1,
      'grpc-node.flow_control_window': opts.receiveWindow ?? 4 * 1024 * 1024,
      'grpc.enable_retries': 0,
      // We reconnect ourselves (client set); a dead channel is discarded.
      'grpc.initial_reconnect_backoff_ms': 1000,
      'grpc.max_reconnect_backoff_ms': 10_000,
    };
    // TLS SNI must be a DNS name (Node deprecates IPs there); for an IP address send a fixed name instead.
    channelOptions['grpc.ssl_target_name_override'] = this.sni();
    this.client = new grpc.Client(opts.address, creds, channelOptions);
  }

  private sni(): string {
    return isIP(this.verifyName) === 0 ? this.verifyName : IP_TARGET_SNI;
  }

  /** Explains a failed connection attempt at the TLS level (see tls-probe.ts). */
  diagnose(): Promise<string> {
    const target = splitHostPort(this.address);
    if (target === undefined) return Promise.resolve(`${this.address} is not host:port`);
    return probeTLS({
      host: target.host,
      port: target.port,
      servername: this.sni(),
      verifyName: this.verifyName,
      ...this.opts.tls,
    });
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  get connCount(): number {
    return this.conns.size;
  }

  get pendingDialCount(): number {
    return this.dials.size;
  }

  /** Opens the call; resolves with the server's identity once its headers arrive. */
  open(): Promise<ServerIdentity> {
    const md = new grpc.Metadata();
    md.set('agentid', this.opts.agentID);
    if (this.opts.identifiers !== '') md.set('agentidentifiers', this.opts.identifiers);
    const connWindow = this.opts.connWindow ?? DEFAULT_CONN_WINDOW;
    if (connWindow > 0) md.set(CONN_WINDOW_HEADER, String(connWindow));
    const call = this.client.makeBidiStreamRequest<KnownPacket, Packet>(
      AGENT_CONNECT_PATH,
      encodePacket,
      decodePacket,
      md,
      {},
    );
    this.call = call;
    const link = new ServerCall(call);
    this.link = link;

    return new Promise<ServerIdentity>((resolve, reject) => {
      let settled = false;
      const settle = (err: Error | undefined, id?: ServerIdentity): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err !== undefined) {
          this.close(err.message);
          reject(err);
        } else {
          resolve(id!);
        }
      };
      const timeoutMs = this.opts.handshakeTimeoutMs ?? 30_000;
      const timer = setTimeout(
        () =>
          settle(
            new ServerConnectionError(
              'YT_ERR_HANDSHAKE_TIMEOUT',
              `no response from tunnel server ${this.address} within ${timeoutMs} ms`,
            ),
          ),
        timeoutMs,
      );
      timer.unref();

      call.on('metadata', (md: grpc.Metadata) => {
        const serverID = singleHeader(md, 'serverid');
        const countText = singleHeader(md, 'servercount');
        const serverCount = countText === undefined ? NaN : Number(countText);
        if (serverID === undefined || serverID === '' || !Number.isInteger(serverCount) || serverCount < 0) {
          settle(
            new ServerConnectionError(
              'YT_ERR_BAD_HEADERS',
              `tunnel server ${this.address} sent no usable serverid/servercount headers ` +
                `(serverid=${JSON.stringify(md.get('serverid'))}, servercount=${JSON.stringify(md.get('servercount'))})`,
            ),
          );
          return;
        }
        const serverWindow = connWindow > 0 ? parseConnWindow(md.get(CONN_WINDOW_HEADER).map(String)) : undefined;
        const flow = serverWindow !== undefined ? { sendWindow: serverWindow, receiveWindow: connWindow } : undefined;
        // Upstream: a count of 0 means "unknown", treated as 1.
        this.identity = { serverID, serverCount: serverCount === 0 ? 1 : serverCount, flow };
        this.sweepTimer = setInterval(() => this.conns.sweep(), 10_000);
        this.sweepTimer.unref();
        settle(undefined, this.identity);
      });
      call.on('data', (p: Packet) => this.onPacket(p));
      call.on('status', (status: grpc.StatusObject) => {
        const reason =
          status.code === grpc.status.OK
            ? 'server ended the stream'
            : `${grpc.status[status.code] ?? status.code}: ${status.details}`;
        settle(new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server ${this.address}: ${reason}`));
        this.close(reason);
      });
      call.on('error', () => {
        // Reported through 'status'.
      });
    });
  }

  private send(p: KnownPacket): void {
    this.link?.sendControl(p);
  }

  private onPacket(p: Packet): void {
    if (this.closed) return;
    if (this.log.enabled(5)) this.log.verbose(5, 'packet from server', describePacket(p));
    switch (p.type) {
      case 'DIAL_REQ':
        this.onDialRequest(p);
        return;
      case 'DATA': {
        const conn = this.conns.get(p.connectID);
        if (conn !== undefined) conn.deliver(p.data);
        else if (!this.conns.isTombstoned(p.connectID)) {
          this.send({ type: 'CLOSE_RSP', connectID: p.connectID, error: 'unrecognized connectID' });
        }
        return;
      }
      case 'CLOSE_REQ': {
        const conn = this.conns.get(p.connectID);
        if (conn !== undefined) conn.remoteClose();
        else if (!this.conns.isTombstoned(p.connectID)) {
          this.send({ type: 'CLOSE_RSP', connectID: p.connectID, error: 'Unknown connectID' });
        }
        return;
      }
      case 'DIAL_CLS': {
        const dial = this.dials.get(p.random);
        if (dial !== undefined) {
          this.log.verbose(3, 'server cancelled a dial', { dialID: p.random.toString() });
          dial.abort();
        }
        return;
      }
      case 'WINDOW_UPDATE':
        if (this.identity?.flow !== undefined) this.conns.get(p.connectID)?.grantCredit(Number(p.bytes));
        else this.log.warn('ignoring WINDOW_UPDATE: flow control was not negotiated', describePacket(p));
        return;
      case 'DIAL_RSP':
      case 'CLOSE_RSP':
      case 'DRAIN':
      case 'UNKNOWN':
        this.log.warn('ignoring a packet servers do not send', describePacket(p));
        return;
    }
  }

  private onDialRequest(p: DialRequestPacket): void {
    const { random, address } = p;
    const fail = (error: string): void => {
      this.log.verbose(1, 'dial failed', { dialID: random.toString(), dialAddress: address, error });
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
    const abort = new AbortController();
    this.dials.set(random, abort);
    this.opts.dialer.dial(address, abort.signal).then(
      (socket) => {
        this.dials.delete(random);
        if (abort.signal.aborted || this.closed || this.link === undefined) {
          socket.destroy();
          return;
        }
        const connectID = this.nextConnectID++;
        const conn = new EndpointConn(this.link, connectID, address, {
          highWaterMark: this.opts.connHighWaterMark,
          flow: this.identity?.flow,
        });
        this.conns.add(conn);
        conn.once('close', () => this.conns.remove(conn));
        // DIAL_RSP goes out before any DATA of this connection.
        this.send({ type: 'DIAL_RSP', random, connectID, error: '' });
        if (this.log.enabled(3)) {
          this.log.verbose(3, 'connection established', {
            dialID: random.toString(),
            connectID: connectID.toString(),
            dialAddress: address,
          });
        }
        splice(socket, conn, (err) => {
          if (this.log.enabled(3)) {
            this.log.verbose(3, 'connection closed', {
              connectID: connectID.toString(),
              dialAddress: address,
              bytesIn: conn.bytesReceived,
              bytesOut: conn.bytesSent,
              ...(err !== undefined ? { error: err.message } : {}),
            });
          }
        });
      },
      (err: unknown) => {
        this.dials.delete(random);
        // A cancelled dial needs no answer: the server has forgotten it.
        if (abort.signal.aborted || this.closed) return;
        fail(errorMessage(err));
      },
    );
  }

  /** Tells the server this agent is going away (DRAIN). */
  drain(): void {
    if (!this.closed) this.send({ type: 'DRAIN' });
  }

  /** Resolves with the reason once the link is closed. */
  whenClosed(): Promise<string> {
    if (this.closedReason !== undefined) return Promise.resolve(this.closedReason);
    return new Promise((resolve) => this.closeWaiters.push(resolve));
  }

  /** Closes the call and every connection made through it. Idempotent. */
  close(reason: string): void {
    if (this.closedReason !== undefined) return;
    this.closedReason = reason;
    clearInterval(this.sweepTimer);
    this.link?.markEnded(reason);
    for (const d of this.dials.values()) d.abort();
    this.dials.clear();
    for (const c of this.conns.takeAll()) c.destroy(new Error(`connection to tunnel server ${this.address} closed: ${reason}`));
    this.call?.cancel();
    this.client.close();
    for (const w of this.closeWaiters.splice(0)) w(reason);
  }
}
