// The server's side of a tunnelled connection joined straight to its
// caller's socket (a SocketRelay): what `tunnel.dialRelay()` resolves to, for
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

  constructor(agent: TunnelConnAgent, connectID: bigint, address: string, opts?: SocketRelayOptions) {
    super(agent.link, connectID, opts);
    this.agentID = agent.agentID;
    this.address = address;
    this.closeWithError = agent.halfClose;
  }

  protected finalPacket(remoteInitiated: boolean, err: Error | null): KnownPacket | undefined {
    return serverFinalPacket(this.connectID, this.closeWithError, remoteInitiated, err);
  }
}
