// The agent port's HTTP/1.1 side (TLS ALPN http/1.1, or none): an agent's
// WebSocket upgrade, on any path, becomes an Arrival for the endpoint's one
// path from admission to serving, its link a WsAgentCall on a
// WsAgentConnection; a plain request gets 426, anything else 400, each with
// one rate-limited line.

import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import type { WebSocketServer } from 'ws';
import type { LogLimiter } from '../log/log-limiter.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { remoteOf } from './agent-connection.js';
import type { Settings } from './agent-endpoint-settings.js';
import type { AgentEndpointMetrics } from './metrics.js';
import type { Arrival } from './served-call.js';
import { WsAgentCall } from './ws-agent-call.js';
import { WsAgentConnection } from './ws-agent-connection.js';
import { addUpgradeHeaders, answerHttp, WsCallHead } from './ws-call-head.js';

export interface WsArrivalsOptions {
  opts: Settings;
  log: Logger;
  limited: LogLimiter;
  tunnel: Tunnel;
  metrics: AgentEndpointMetrics;
  remoteAddressOf(socket: TLSSocket): string;
  arrive(arrival: Arrival): void;
}

const NOT_AN_AGENT = 'this is the tunnel server agent port: it speaks gRPC (HTTP/2, ALPN h2) or a WebSocket upgrade (RFC 6455), nothing else\n';

export class WsArrivals {
  /** Agents' WebSocket connections, once upgraded. */
  readonly connections = new Set<WsAgentConnection>();
  private readonly http1: http.Server;
  /**
   * ws's server, loaded at the first HTTP/1.1 connection: a server whose agents
   * all speak gRPC never loads the ws package (~1/5 of a server's start-up CPU
   * for module loading; test/unit/startup-packages.test.ts).
   */
  private wss: Promise<WebSocketServer> | undefined;
  private closed = false;

  constructor(private readonly o: WsArrivalsOptions) {
    this.http1 = http.createServer();
    this.http1.on('request', (req: IncomingMessage, res: ServerResponse) => this.onPlainRequest(req, res));
    this.http1.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.onUpgrade(req, socket as TLSSocket, head));
    this.http1.on('clientError', (err: Error, socket: Duplex) => {
      o.limited.warn('malformed HTTP/1.1 request on the agent port; answered 400', { remoteAddress: remoteOf(socket as TLSSocket), error: errorMessage(err) });
      answerHttp(socket, 400, 'malformed HTTP/1.1 request');
    });
  }

  /** A TLS connection that negotiated HTTP/1.1 (or nothing). */
  take(socket: TLSSocket): void {
    // As long for its upgrade as a connection has for its TLS handshake (node:http's head timeout runs only on a server that listens itself).
    socket.setTimeout(this.o.opts.tlsHandshakeTimeoutMs, () => socket.destroy());
    // Loaded while the request head comes.
    void this.upgrader().catch(() => {});
    this.http1.emit('connection', socket);
  }

  close(): void {
    this.closed = true;
    for (const connection of this.connections) connection.drop('yurt-tunnel-server is shutting down');
    void this.wss?.then(
      (wss) => wss.close(),
      () => {},
    );
    this.http1.close();
  }

  private upgrader(): Promise<WebSocketServer> {
    this.wss ??= import('ws').then(({ WebSocketServer }) => {
      const wss = new WebSocketServer({ noServer: true, maxPayload: this.o.opts.maxMessageSize, perMessageDeflate: false, clientTracking: false });
      addUpgradeHeaders(wss);
      return wss;
    });
    return this.wss;
  }

  private onPlainRequest(req: IncomingMessage, res: ServerResponse): void {
    this.o.limited.warn('plain HTTP/1.1 request on the agent port; answered 426', { remoteAddress: remoteOf(req.socket), method: req.method });
    res.writeHead(426, {
      connection: 'close, upgrade',
      upgrade: 'websocket',
      'content-type': 'text/plain; charset=utf-8',
      'content-length': Buffer.byteLength(NOT_AN_AGENT),
    });
    res.end(NOT_AN_AGENT);
  }

  private onUpgrade(req: IncomingMessage, socket: TLSSocket, head: Buffer): void {
    const { o } = this;
    const remoteAddress = o.remoteAddressOf(socket);
    socket.on('error', (err) => o.log.verbose(2, 'agent WebSocket connection error', { remoteAddress, error: errorMessage(err) }));
    if (String(req.headers.upgrade ?? '').toLowerCase() !== 'websocket' || req.method !== 'GET') {
      o.limited.warn('upgrade to something other than a WebSocket on the agent port; answered 400', {
        remoteAddress,
        upgrade: String(req.headers.upgrade ?? ''),
      });
      answerHttp(socket, 400, 'the agent port upgrades to a WebSocket only (GET with "Upgrade: websocket")');
      return;
    }
    this.upgrader().then(
      (wss) => {
        if (this.closed) socket.destroy();
        else if (!socket.destroyed) this.arrive(req, socket, head, wss, remoteAddress);
      },
      (err: unknown) => {
        o.limited.warn('the WebSocket transport could not be loaded; answered 500', { remoteAddress, error: errorMessage(err) });
        answerHttp(socket, 500, 'the WebSocket transport could not be loaded');
      },
    );
  }

  /** An upgrade to a WebSocket, to admission. */
  private arrive(req: IncomingMessage, socket: TLSSocket, head: Buffer, wss: WebSocketServer, remoteAddress: string): void {
    const { o } = this;
    socket.setTimeout(0);
    const call = new WsCallHead(req, socket, head, wss);
    const { keepaliveTimeMs, keepaliveTimeoutMs } = o.opts;
    const connection = new WsAgentConnection(socket, { keepaliveTimeMs, keepaliveTimeoutMs, log: o.limited }, remoteAddress);
    o.arrive({
      head: call,
      socket,
      connection,
      remoteAddress,
      open: (logger) =>
        new WsAgentCall({
          maxMessageSize: o.opts.maxMessageSize,
          controlBufferLimit: o.opts.controlBufferLimit,
          onControlRefused: () => o.metrics.refused('unread_control'),
          onPacketSent: (type) => o.tunnel.metrics.packetSent(type),
          logger,
        }),
      accept: (link, metadata) => {
        const ws = call.accept(metadata);
        if (ws === undefined) return;
        (link as WsAgentCall).attach(ws);
        connection.start(ws);
        this.connections.add(connection);
        ws.once('close', () => this.connections.delete(connection));
      },
    });
  }
}
