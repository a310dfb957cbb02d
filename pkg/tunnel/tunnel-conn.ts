// The server's side of a tunnelled connection: what `tunnel.dial()` resolves
// to. Ending it sends CLOSE_REQ and waits for the agent's CLOSE_RSP.

import { PacketConn, type PacketConnOptions } from '../mux/packet-conn.js';
import type { KnownPacket } from '../protocol/packet.js';
import type { Backend } from './backend.js';

export class TunnelConn extends PacketConn {
  readonly agentID: string;
  readonly address: string;
  protected readonly endsWithFinalPacket = false;

  constructor(backend: Backend, connectID: bigint, address: string, opts?: PacketConnOptions) {
    super(backend.link, connectID, opts);
    this.agentID = backend.agentID;
    this.address = address;
  }

  protected finalPacket(remoteInitiated: boolean): KnownPacket | undefined {
    return remoteInitiated ? undefined : { type: 'CLOSE_REQ', connectID: this.connectID };
  }
}
