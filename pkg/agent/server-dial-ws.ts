// Dials one tunnel server over a WebSocket (RFC 6455) on its agent port: TLS
// with ALPN http/1.1 (a load balancer in the way may terminate it), the
// upgrade request carrying the call's metadata as headers, the 101 carrying
// the server's. What follows is the same packet link as over gRPC
// (ws-client-call.ts).

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import WebSocket from 'ws';
import { describeGrpcStatus } from '../grpc/status.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import {
  callMetadata,
  connectFailed,
  openBeneath,
  readAccepted,
  refusedByServer,
  tlsOver,
  whenStopping,
  type DialTarget,
  type ServerAnswer,
} from './server-dial.js';

/** Largest message taken from the server (one Packet), as gRPC's default limit. */
const MAX_MESSAGE_SIZE = 4 * 1024 * 1024;

/** The path the agent asks for; the server takes any (a load balancer may route by it). */
export const WEBSOCKET_PATH = '/yurt-tunnel/agent';

/** A WebSocket link the server accepted, with what its 101 said. */
export interface WsDialedCall extends ServerAnswer {
  transport: 'websocket';
  ws: WebSocket;
  /** The TLS socket beneath. */
  socket: Socket;
}

/**
 * Opens the WebSocket link to `t`: TLS over the TCP connection server-dial.ts
 * makes (straight to the server, or through the HTTP or SOCKS proxy).
 */
export async function dialWebSocket(t: DialTarget, log: Logger, signal?: AbortSignal): Promise<WsDialedCall> {
  const { authority, socket: beneath } = await openBeneath(t, signal);
  let socket: Socket | undefined;
  const ws = new WebSocket(`wss://${authority}${WEBSOCKET_PATH}`, {
    createConnection: () => (socket = tlsOver(t, beneath, 'http/1.1')),
    // Metadata as request headers (a repeated value as repeated header lines).
    headers: callMetadata(t),
    perMessageDeflate: false,
    maxPayload: MAX_MESSAGE_SIZE,
    followRedirects: false,
    handshakeTimeout: t.handshakeTimeoutMs,
  });
  return new Promise<WsDialedCall>((resolve, reject) => {
    let settled = false;
    let raw: string[] | undefined;
    const fail = (err: Error): void => {
      if (settled) return;
      settled = true;
      ws.terminate();
      socket?.destroy();
      beneath.destroy();
      reject(err);
    };
    whenStopping(t, signal, fail);
    ws.once('upgrade', (res: IncomingMessage) => {
      raw = res.rawHeaders.map((v, i) => (i % 2 === 0 ? v.toLowerCase() : v));
    });
    ws.once('unexpected-response', (req, res: IncomingMessage) => {
      const status = res.headers['grpc-status'] as string | undefined;
      const text = `HTTP ${res.statusCode}${status === undefined ? '' : `, ${describeGrpcStatus(status, res.headers['grpc-message'] as string | undefined)}`}`;
      const err = connectFailed(t, `refused the WebSocket upgrade (${text})`);
      if (status !== undefined) refusedByServer.add(err);
      res.resume();
      req.destroy();
      fail(err);
    });
    ws.on('error', (err: Error) => {
      if (!settled) fail(connectFailed(t, `WebSocket: ${errorMessage(err)}`, err));
      else log.verbose(2, 'WebSocket error', { error: errorMessage(err) });
    });
    ws.once('close', () => fail(connectFailed(t, 'the connection closed before the WebSocket opened')));
    ws.once('open', () => {
      if (settled) return;
      const answer = readAccepted(t, raw ?? []);
      if (answer instanceof Error) return fail(answer);
      settled = true;
      resolve({ transport: 'websocket', ws, socket: socket!, ...answer });
    });
  });
}
