// The agent's side of a tunnelled connection: wraps nothing itself; the
// server connection pipes it to the dialled socket. The agent owes the server
// a CLOSE_RSP however the connection ends (the target closed, the server sent
// CLOSE_REQ, or an error); when the target failed (reset the connection) its
// `error` says so, and the server resets the caller.

import { PacketConn, type PacketConnOptions } from '../mux/packet-conn.js';
import type { PacketLink } from '../mux/packet-link.js';
import type { KnownPacket } from '../protocol/packet.js';

export class EndpointConn extends PacketConn {
  protected readonly endsWithFinalPacket = true;

  constructor(
    link: PacketLink,
    connectID: bigint,
    readonly address: string,
    opts?: PacketConnOptions,
  ) {
    super(link, connectID, opts);
  }

  protected finalPacket(remoteInitiated: boolean, err: Error | null): KnownPacket {
    const error = err !== null && !remoteInitiated ? err.message || err.name : '';
    return { type: 'CLOSE_RSP', connectID: this.connectID, error };
  }
}
