// An agent's Connect call as the tunnel's AgentLink: the gRPC call with its
// status trailers beneath, the tunnel's own ends above. The tunnel closes a
// link for `shutdown` or `cut-off` and learns how each one ended; here those
// become statuses and resets, and statuses and resets become ends again.

import type { ServerHttp2Stream } from 'node:http2';
import type { GrpcPacketStreamOptions } from '../grpc/packet-stream.js';
import { GrpcStatus } from '../grpc/status.js';
import { ServerPacketCall } from '../grpc/server-call.js';
import type { AgentLink, AgentLinkClose, AgentLinkEnd } from '../tunnel/agent-link.js';
import type { AdmittedLink } from '../tunnel/sessions.js';
import type { Tunnel } from '../tunnel/tunnel.js';
import { GivenEnd } from './given-end.js';
import type { ServedCall } from './served-call.js';

export class AgentCall extends ServerPacketCall implements AgentLink {
  private readonly ends = new GivenEnd();

  close(end: AgentLinkClose): void {
    this.ends.close(this, end);
  }

  endFor(end: AgentLinkEnd, code: number): void {
    this.ends.endFor(this, end, code);
  }

  /** How the call ended, given the reason it closed with (`left`: the agent finished its stream, answered OK). */
  endOf(reason: string): AgentLinkEnd {
    return this.ends.endOf(reason, this.endStatus?.code === GrpcStatus.OK);
  }
}

// The two functions below are where an agent's call meets the tunnel, for the
// agent endpoint and for the server's start-up rehearsal alike: V8 compiles
// per closure site, so a rehearsal that made its own closures (or left out
// the write tracker) warmed code that real links never run, and the real
// links' code was compiled during the first caller's round trips.

/** An agent's call, counting the packets it sends in `tunnel`'s metrics. */
export function openAgentCall(stream: ServerHttp2Stream, tunnel: Tunnel, opts: Omit<GrpcPacketStreamOptions, 'onPacketSent'>): AgentCall {
  return new AgentCall(stream, {
    maxMessageSize: opts.maxMessageSize,
    writeTracker: opts.writeTracker,
    controlBufferLimit: opts.controlBufferLimit,
    onControlRefused: opts.onControlRefused,
    onPacketSent: (type) => tunnel.metrics.packetSent(type),
    logger: opts.logger,
  });
}

/** Starts `link`: its packets go where the tunnel admitted it (`admitted`) until it ends; then `onEnd`, and the tunnel learns how it ended. */
export function carryAgentPackets(admitted: AdmittedLink, link: ServedCall, onEnd: () => void): void {
  link.start({
    onPacket: admitted.receive,
    onClose: (reason) => {
      onEnd();
      admitted.ended(link.endOf(reason));
    },
  });
}
