// An agent's stream as the tunnel sees it: a packet link that the tunnel can
// end, and that tells the tunnel how it ended. The transport that carries it
// (pkg/endpoint: gRPC over HTTP/2 and mutual TLS) speaks status codes and
// resets; the tunnel speaks only of these ends.

import type { PacketLink } from '../mux/packet-link.js';

/**
 * How an agent's link ended.
 *
 * Three ends are meant by one side or both: `left`, the agent ended its
 * stream (it drained and goes away, or it stops); `shutdown`, this server is
 * stopping; `cut-off`, the server stopped serving an agent that broke a rule
 * (too many unknown packets, too many pings). `failed` is the one end nobody
 * chose: the stream or its connection broke (a reset, a lost connection, a
 * keepalive timeout, bytes that are not packets, a peer that stopped
 * reading). Only a failure may some day be bridged (the agent comes back and
 * its connections resume); a meant end always closes what the link carried.
 */
export type AgentLinkEndKind = 'left' | 'shutdown' | 'cut-off' | 'failed';

export interface AgentLinkEnd {
  readonly kind: AgentLinkEndKind;
  /** What happened, for logs and for the errors of the dials and connections the link took with it. */
  readonly message: string;
}

/** The ends the tunnel itself gives a link. */
export interface AgentLinkClose extends AgentLinkEnd {
  readonly kind: 'shutdown' | 'cut-off';
}

export interface AgentLink extends PacketLink {
  /**
   * Ends the link: `shutdown` says goodbye, `cut-off` also stops reading the
   * agent at once. The link reports its end to its owner like any other.
   */
  close(end: AgentLinkClose): void;
}
