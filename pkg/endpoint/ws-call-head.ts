// The WebSocket upgrade of an agent as admission reads a gRPC call's head: its
// request headers are the call's metadata (agentid, agentidentifiers, flow,
// half-close, resume claims, the same names), any path. A refusal is an HTTP
// answer with the status's grpc-status/grpc-message headers; acceptance is
// the 101, carrying the response metadata (serverid, servercount, ...) as
// headers.

import { STATUS_CODES, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import type { WebSocketServer } from 'ws';
import type { CallRefusal } from '../grpc/server-call-head.js';
import { encodeGrpcMessage } from '../grpc/status.js';
import { httpStatusOf } from '../grpc/ws-status.js';
import { metadataValues } from '../grpc/metadata.js';

/** Response headers for the 101 of each upgrade being accepted (ws asks for them in its 'headers' event). */
export const upgradeHeaders = new WeakMap<IncomingMessage, Readonly<Record<string, string>>>();

/** Adds the 101's metadata: install once on the WebSocketServer. */
export function addUpgradeHeaders(wss: WebSocketServer): void {
  wss.on('headers', (headers: string[], req: IncomingMessage) => {
    for (const [name, value] of Object.entries(upgradeHeaders.get(req) ?? {})) headers.push(`${name}: ${value}`);
  });
}

/** Writes a complete HTTP/1.1 answer on `socket` and closes it. */
export function answerHttp(socket: Duplex, status: number, text: string, headers: Readonly<Record<string, string>> = {}): void {
  if (socket.destroyed || !socket.writable) return;
  const body = `${text}\n`;
  const lines = [
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}`,
    'connection: close',
    'content-type: text/plain; charset=utf-8',
    `content-length: ${Buffer.byteLength(body)}`,
  ];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  socket.end(`${lines.join('\r\n')}\r\n\r\n${body}`);
  socket.once('finish', () => socket.destroy());
}

export class WsCallHead {
  /** The request's raw headers, names lower-cased (HTTP/1.1 keeps the sender's case; gRPC metadata names are lower case). */
  private readonly rawHeaders: string[];
  private answered = false;

  constructor(
    private readonly req: IncomingMessage,
    private readonly socket: Duplex,
    private readonly head: Buffer,
    private readonly wss: WebSocketServer,
  ) {
    this.rawHeaders = req.rawHeaders.map((v, i) => (i % 2 === 0 ? v.toLowerCase() : v));
  }

  metadata(name: string): string[] {
    return metadataValues(this.rawHeaders, name);
  }

  /** Any path serves the agent link (load balancers route by path; the agent's URL chooses it). */
  check(_paths: readonly string[]): CallRefusal | undefined {
    return undefined;
  }

  /** Answers the upgrade with an HTTP status and the refusal's grpc-status/grpc-message; false if answered already. */
  refuse(refusal: CallRefusal): boolean {
    if (this.answered) return false;
    this.answered = true;
    answerHttp(this.socket, httpStatusOf(refusal.code), refusal.message, {
      'grpc-status': String(refusal.code),
      'grpc-message': encodeGrpcMessage(refusal.message),
    });
    return true;
  }

  /** Completes the upgrade with `metadata` in the 101; the WebSocket, or undefined if the socket went away meanwhile. */
  accept(metadata: Readonly<Record<string, string>>): WebSocket | undefined {
    this.answered = true;
    let opened: WebSocket | undefined;
    upgradeHeaders.set(this.req, metadata);
    // Synchronous without verifyClient: the callback runs before handleUpgrade returns, or never (socket gone).
    this.wss.handleUpgrade(this.req, this.socket, this.head, (ws) => (opened = ws));
    upgradeHeaders.delete(this.req);
    return opened;
  }
}
