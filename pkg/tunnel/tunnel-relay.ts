// The server's side of a tunnelled connection joined straight to its
// caller's socket (a SocketRelay), for frontends that only join a socket to
// the connection (HTTP CONNECT). Its close handshake is TunnelConn's:
// CLOSE_REQ, then the agent's CLOSE_RSP.

import { serverClose } from '../mux/close-handshake.js';
import { SocketRelay, type SocketRelayOptions } from '../mux/socket-relay.js';
import type { TunnelConnAgent } from './tunnel-conn.js';

export class TunnelRelay extends SocketRelay {
  readonly agentID: string;
  readonly address: string;
  private readonly agent: TunnelConnAgent;
  private readonly resumesAtOpen: number;

  constructor(agent: TunnelConnAgent, connectID: bigint, address: string, opts?: SocketRelayOptions) {
    super(agent.link, connectID, serverClose(agent.halfClose), opts);
    this.agentID = agent.agentID;
    this.address = address;
    this.agent = agent;
    this.resumesAtOpen = agent.resumes ?? 0;
  }

  /** Times the agent's session was resumed while this connection was open: the blips it survived. */
  get resumes(): number {
    return (this.agent.resumes ?? 0) - this.resumesAtOpen;
  }
}
