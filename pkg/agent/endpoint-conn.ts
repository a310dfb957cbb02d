// The agent's side of a tunnelled connection, joined straight to the socket
// it dialled (a SocketRelay). The agent owes the server a CLOSE_RSP however
// the connection ends (close-handshake.ts, AGENT_CLOSE).

import { AGENT_CLOSE } from '../mux/close-handshake.js';
import type { PacketLink } from '../mux/packet-link.js';
import { SocketRelay, type SocketRelayOptions } from '../mux/socket-relay.js';

export class EndpointConn extends SocketRelay {
  constructor(
    link: PacketLink,
    connectID: bigint,
    readonly address: string,
    opts?: SocketRelayOptions,
  ) {
    super(link, connectID, AGENT_CLOSE, opts);
  }
}
