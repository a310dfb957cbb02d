// The client's end of a packet link, whichever carries it: a gRPC call
// (client-call.ts) or the agent's WebSocket (pkg/agent/ws-client-call.ts).
// Both end alike: a malformed message, control packets piling up unread and a
// handler that threw cancel the link as a failure (session resume bridges
// it), a goodbye is a deliberate end, and an end the server gave is told
// apart from a failure. Only how each shows on the wire differs.

import { GrpcPacketStream } from './packet-stream.js';
import type { ProtocolError } from '../protocol/errors.js';

export abstract class ClientPacketStream extends GrpcPacketStream {
  /** The server ended the link itself (a status, or its half-close): a goodbye, not a failure. */
  endedByServer = false;

  /** Says goodbye, which the server takes for a deliberate end. */
  goodbye(reason: string): void {
    this.finish(reason);
    this.sendGoodbye();
  }

  /** Ends the link from our side as a failure, for `reason`: the server keeps its session for a resume. */
  cancel(reason: string): void {
    this.finish(reason);
    this.breakLink();
  }

  /** How a goodbye shows on the wire. */
  protected abstract sendGoodbye(): void;

  /** How a failure shows on the wire: never as a goodbye. */
  protected abstract breakLink(): void;

  /** The server ended the link, for `reason`. */
  protected serverEnded(reason: string): void {
    this.endedByServer = true;
    this.finish(reason);
  }

  protected onProtocolError(err: ProtocolError): void {
    this.cancel(`server sent a malformed message: ${err.message}`);
  }

  protected onOverloaded(message: string): void {
    this.cancel(message);
  }

  protected onInternalError(message: string): void {
    this.cancel(message);
  }
}
