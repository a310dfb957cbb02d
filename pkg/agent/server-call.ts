// The agent's `AgentService/Connect` call (grpc-js) as a PacketLink.

import type { ClientDuplexStream } from '@grpc/grpc-js';
import type { PacketLink } from '../mux/packet-link.js';
import { PauseGate } from '../mux/pause-gate.js';
import type { KnownPacket, Packet } from '../protocol/packet.js';

export type ConnectCall = ClientDuplexStream<KnownPacket, Packet>;

export class ServerCall implements PacketLink {
  private readonly gate: PauseGate;
  private drainWaiters: Array<(err?: Error | null) => void> = [];
  private ended = false;

  constructor(private readonly call: ConnectCall) {
    this.gate = new PauseGate(
      () => call.pause(),
      () => call.resume(),
    );
    call.on('drain', () => this.flush());
  }

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    if (this.ended) {
      cb(new Error('connection to the tunnel server is closed'));
      return;
    }
    if (this.call.write({ type: 'DATA', connectID, error: '', data })) cb();
    else this.drainWaiters.push(cb);
  }

  sendControl(packet: KnownPacket): boolean {
    if (this.ended) return false;
    this.call.write(packet);
    return true;
  }

  pauseReceive(holder: object): void {
    this.gate.hold(holder);
  }

  resumeReceive(holder: object): void {
    if (!this.ended) this.gate.release(holder);
  }

  /** The call is over: fail waiting senders, stop sending. */
  markEnded(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    this.gate.clear();
    this.flush(new Error(`connection to the tunnel server closed: ${reason}`));
  }

  private flush(err?: Error): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const cb of waiters) cb(err ?? null);
  }
}
