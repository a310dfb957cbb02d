// The end the tunnel gives an agent link, on either transport (agent-call.ts
// for gRPC, ws-agent-call.ts for a WebSocket): `close` turns the tunnel's
// shutdown or cut-off into a status, and `endOf` reads how the link ended
// back into the tunnel's terms. Only how "the agent left" shows differs: an
// OK status on gRPC, a normal close (1000) on a WebSocket.

import { GrpcStatus } from '../grpc/status.js';
import type { AgentLinkClose, AgentLinkEnd } from '../tunnel/agent-link.js';

/** What a link ends with: a status, and a cut-off that reads nothing more first. */
export interface StatusEnds {
  cutOff(code: number, message: string): void;
  end(code: number, message: string): void;
}

export class GivenEnd {
  /** Why we ended the link ourselves, in the tunnel's terms. */
  private given: AgentLinkEnd | undefined;

  get isGiven(): boolean {
    return this.given !== undefined;
  }

  /** `shutdown` ends the link with UNAVAILABLE (agents retry elsewhere); `cut-off` with RESOURCE_EXHAUSTED. */
  close(link: StatusEnds, end: AgentLinkClose): void {
    if (end.kind === 'cut-off') {
      this.given ??= end;
      link.cutOff(GrpcStatus.RESOURCE_EXHAUSTED, end.message);
    } else {
      this.endFor(link, end, GrpcStatus.UNAVAILABLE);
    }
  }

  /** Ends the link with `code`, for `end`. */
  endFor(link: StatusEnds, end: AgentLinkEnd, code: number): void {
    this.given ??= end;
    link.end(code, end.message);
  }

  /** How the link ended: as we ended it, `left` when the agent said goodbye, else `failed`. */
  endOf(reason: string, agentLeft: boolean): AgentLinkEnd {
    if (this.given !== undefined) return this.given;
    return agentLeft ? { kind: 'left', message: reason } : { kind: 'failed', message: reason };
  }
}
