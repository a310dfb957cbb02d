// The agent's side of a tunnelled connection, joined straight to the socket
// it dialled (a SocketRelay). The agent owes the server a CLOSE_RSP however
// the connection ends (the target closed, the server sent CLOSE_REQ, or an
// error); when the target failed (reset the connection) its error text says
// so, and the server resets the caller.

import type { PacketLink } from '../mux/packet-link.js';
import { SocketRelay, type SocketRelayOptions } from '../mux/socket-relay.js';
import type { KnownPacket } from '../protocol/packet.js';

export class EndpointConn extends SocketRelay {
  protected readonly endsWithFinalPacket = true;

  constructor(
    link: PacketLink,
    connectID: bigint,
    readonly address: string,
    opts?: SocketRelayOptions,
  ) {
    super(link, connectID, opts);
  }

  protected finalPacket(remoteInitiated: boolean, err: Error | null): KnownPacket {
    const error = err !== null && !remoteInitiated ? err.message || err.name : '';
    return { type: 'CLOSE_RSP', connectID: this.connectID, error };
  }
}
