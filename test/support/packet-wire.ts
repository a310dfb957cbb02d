// Two PacketLink ends joined by an in-memory wire that can be cut, for tests
// of what rides on a link (session resume): packets go through the real codec
// (so DATA arrives as a fresh Buffer, as over gRPC), are delivered in order on
// a later turn, and a cut loses everything still in flight, the way a dropped
// call does. Back-pressure as GrpcPacketStream gives it: sendData's callback
// waits while more than `capacity` bytes are in flight.

import { encodePacket } from '../../pkg/protocol/codec.js';
import { decodePacket } from '../../pkg/protocol/decode.js';
import type { KnownPacket, Packet } from '../../pkg/protocol/packet.js';
import type { PacketLink } from '../../pkg/mux/packet-link.js';

type Receiver = (from: PacketLink, packet: Packet) => void;

export class WireEnd implements PacketLink {
  peer!: WireEnd;
  /** Packets sent through this end, by type (acknowledgements alone counted as ACK). */
  readonly sent = new Map<string, number>();
  /** Who has paused receiving on this end. */
  readonly pausedBy = new Set<object>();
  private queue: Buffer[] = [];
  private inFlightBytes = 0;
  private waiters: Array<(err?: Error | null) => void> = [];
  private scheduled = false;

  constructor(
    private readonly wire: PacketWire,
    /** Where the packets that arrive at this end go (set by the test). */
    public onPacket: Receiver,
  ) {}

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    if (this.wire.isCut) {
      cb(new Error('the wire is cut'));
      return;
    }
    this.push({ type: 'DATA', connectID, error: '', data });
    if (this.peer.inFlightBytes <= this.wire.capacity) cb();
    else this.waiters.push(cb);
  }

  sendControl(packet: KnownPacket): boolean {
    if (this.wire.isCut) return false;
    this.push(packet);
    return true;
  }

  pauseReceive(holder: object): void {
    this.pausedBy.add(holder);
  }

  resumeReceive(holder: object): void {
    this.pausedBy.delete(holder);
  }

  private push(packet: KnownPacket): void {
    const name = packet.type === 'WINDOW_UPDATE' && packet.connectID === 0n ? 'ACK' : packet.type;
    this.sent.set(name, (this.sent.get(name) ?? 0) + 1);
    const bytes = encodePacket(packet);
    this.peer.queue.push(bytes);
    this.peer.inFlightBytes += bytes.length;
    this.peer.schedule();
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.deliver();
    });
  }

  /** Delivers a few packets per turn, so that a cut finds some still in flight. */
  private deliver(): void {
    for (let n = 0; n < this.wire.packetsPerTurn && this.queue.length > 0 && !this.wire.isCut; n++) {
      const bytes = this.queue.shift()!;
      this.inFlightBytes -= bytes.length;
      this.onPacket(this, decodePacket(bytes));
    }
    if (this.inFlightBytes <= this.wire.capacity || this.wire.isCut) this.peer.flushWaiters();
    if (this.queue.length > 0 && !this.wire.isCut) this.schedule();
  }

  flushWaiters(err?: Error): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const cb of waiters) cb(err ?? null);
  }

  dropInFlight(): number {
    const n = this.queue.length;
    this.queue = [];
    this.inFlightBytes = 0;
    return n;
  }
}

export class PacketWire {
  readonly a: WireEnd;
  readonly b: WireEnd;
  isCut = false;
  /** Packets lost by the cut. */
  lost = 0;

  constructor(
    onA: Receiver,
    onB: Receiver,
    readonly capacity = 256 * 1024,
    readonly packetsPerTurn = 4,
  ) {
    this.a = new WireEnd(this, onA);
    this.b = new WireEnd(this, onB);
    this.a.peer = this.b;
    this.b.peer = this.a;
  }

  /** Drops the wire: what is in flight is lost; senders waiting for room are told it failed. */
  cut(): void {
    if (this.isCut) return;
    this.isCut = true;
    this.lost = this.a.dropInFlight() + this.b.dropInFlight();
    const err = new Error('the wire is cut');
    this.a.flushWaiters(err);
    this.b.flushWaiters(err);
  }
}
