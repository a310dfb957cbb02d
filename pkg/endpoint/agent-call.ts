// An agent's Connect call as the tunnel's AgentLink: the gRPC call with its
// status trailers beneath, the tunnel's own ends above. The tunnel closes a
// link for `shutdown` or `cut-off` and learns how each one ended; here those
// become statuses and resets, and statuses and resets become ends again.

import { GrpcStatus } from '../grpc/status.js';
import { ServerPacketCall } from '../grpc/server-call.js';
import type { AgentLink, AgentLinkClose, AgentLinkEnd } from '../tunnel/agent-link.js';

export class AgentCall extends ServerPacketCall implements AgentLink {
  /** Why we ended the call ourselves, in the tunnel's terms. */
  private given: AgentLinkEnd | undefined;

  /** `shutdown` ends the call with UNAVAILABLE (agents retry elsewhere); `cut-off` with RESOURCE_EXHAUSTED, then a reset. */
  close(end: AgentLinkClose): void {
    if (end.kind === 'cut-off') {
      this.given ??= end;
      this.cutOff(GrpcStatus.RESOURCE_EXHAUSTED, end.message);
    } else {
      this.endFor(end, GrpcStatus.UNAVAILABLE);
    }
  }

  /** Ends the call with `code`, for `end`. */
  endFor(end: AgentLinkEnd, code: number): void {
    this.given ??= end;
    this.end(code, end.message);
  }

  /**
   * How the call ended, given the reason it closed with: as we ended it, or
   * `left` when the agent finished its stream (answered OK), or `failed`.
   */
  endOf(reason: string): AgentLinkEnd {
    if (this.given !== undefined) return this.given;
    return this.endStatus?.code === GrpcStatus.OK ? { kind: 'left', message: reason } : { kind: 'failed', message: reason };
  }
}
