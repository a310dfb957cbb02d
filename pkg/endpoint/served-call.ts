// What the agent endpoint needs of an agent's link and of the connection it
// rides on, whichever the transport: a gRPC call on an HTTP/2 connection
// (agent-call.ts, agent-connection.ts) or a WebSocket (ws-agent-call.ts,
// ws-agent-connection.ts). Admission, identity, sessions and the tunnel see
// only these.

import type { TLSSocket } from 'node:tls';
import type { GrpcPacketStreamHandlers } from '../grpc/packet-stream.js';
import type { Logger } from '../log/logger.js';
import type { CallHead, Refusal } from './admission.js';
import type { PingPolicy } from '../grpc/ping-policy.js';
import type { AgentLink, AgentLinkEnd } from '../tunnel/agent-link.js';

export interface ServedCall extends AgentLink {
  start(handlers: GrpcPacketStreamHandlers): void;
  /** Ends the link with gRPC status `code`, for `end`. */
  endFor(end: AgentLinkEnd, code: number): void;
  /** How the link ended, given the reason it closed with. */
  endOf(reason: string): AgentLinkEnd;
  /** Drops the link without a status (its connection is dead). */
  abort(reason: string): void;
  onceClosed(cb: () => void): void;
}

export interface LinkConnection {
  readonly remoteAddress: string;
  /** The agent links riding on this connection. */
  readonly calls: Set<ServedCall>;
  readonly roundTripMs: number | undefined;
  readonly minRoundTripMs: number | undefined;
  /** grpc-go's ping policy, on HTTP/2 connections. */
  readonly pings?: PingPolicy;
  /** Whether the agent still answers on this connection within `timeoutMs`. */
  answers(timeoutMs: number): Promise<boolean>;
  /** Ends every link on the connection as failed, for `reason`, and destroys it. */
  drop(reason: string): void;
}

/** The agent's side of the link, for `instanceof`-free checks of links the endpoint serves. */
export function isServedCall(x: unknown): x is ServedCall {
  return (
    typeof x === 'object' && x !== null && typeof (x as Partial<ServedCall>).abort === 'function' && typeof (x as Partial<ServedCall>).endOf === 'function'
  );
}

/** What a call's head can do besides being read: refuse the call. */
export interface AnsweringHead extends CallHead {
  refuse(refusal: Refusal): boolean;
}

/** One call arriving on either transport, for the endpoint's one path from admission to serving. */
export interface Arrival {
  head: AnsweringHead;
  /** The TLS connection the call came on. */
  socket: TLSSocket | undefined;
  connection: LinkConnection | undefined;
  remoteAddress: string;
  /** The link for the call, made before the answer (the tunnel may write to it as soon as it attaches). */
  open(log: Logger): ServedCall;
  /** Answers the call with `metadata`: the call's response headers, or the 101. */
  accept(link: ServedCall, metadata: Readonly<Record<string, string>>): void;
}
