// What a multiplexed connection needs from the packet stream it rides on. The
// server implements it over an agent's HTTP/2 stream, the agent over its gRPC
// call to the server.

import type { KnownPacket } from '../protocol/packet.js';

export interface PacketLink {
  /**
   * Sends a DATA packet. `cb` is called when the link can take more: at once
   * while its send buffer has room, later when it has drained. An error means
   * the link is gone.
   */
  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void;
  /** Sends a small control packet without waiting. Returns false if the link is gone. */
  sendControl(packet: KnownPacket): boolean;
  /** Stops delivering packets while `holder` cannot take more. */
  pauseReceive(holder: object): void;
  /** Undoes `pauseReceive(holder)`. */
  resumeReceive(holder: object): void;
  /**
   * True while the link's transport is gone and may come back (session
   * resume): timers that wait on the peer wait on rather than fail.
   */
  readonly suspended?: boolean;
}
