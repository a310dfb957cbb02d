// The server's side of a tunnelled connection joined straight to its
// caller's socket (a SocketRelay): what `tunnel.dialRelayThen()` hands over, for
// frontends that only join a socket to the connection (HTTP CONNECT). Its
// close handshake is TunnelConn's: CLOSE_REQ, then the agent's CLOSE_RSP.

import { SocketRelay, type SocketRelayOptions } from '../mux/socket-relay.js';
import type { KnownPacket } from '../protocol/packet.js';
import { serverFinalPacket, type TunnelConnAgent } from './tunnel-conn.js';

export class TunnelRelay extends SocketRelay {
  readonly agentID: string;
  readonly address: string;
  protected readonly endsWithFinalPacket = false;
  /** The agent reads CLOSE_REQ's error (it negotiated half-close). */
  private readonly closeWithError: boolean;
  private readonly agent: TunnelConnAgent;
  private readonly resumesAtOpen: number;

  constructor(agent: TunnelConnAgent, connectID: bigint, address: string, opts?: SocketRelayOptions) {
    super(agent.link, connectID, opts);
    this.agentID = agent.agentID;
    this.address = address;
    this.closeWithError = agent.halfClose;
    this.agent = agent;
    this.resumesAtOpen = agent.resumes ?? 0;
  }

  /** Times the agent's session was resumed while this connection was open: the blips it survived. */
  get resumes(): number {
    return (this.agent.resumes ?? 0) - this.resumesAtOpen;
  }

  protected finalPacket(remoteInitiated: boolean, err: Error | null): KnownPacket | undefined {
    return serverFinalPacket(this.connectID, this.closeWithError, remoteInitiated, err);
  }
}
