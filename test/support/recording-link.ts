// A link that records what a tunnelled connection asks of it (DATA, control
// packets, pauses) and can hold back sendData's callbacks: the unit tests of
// PacketConn and SocketRelay drive a connection through it with no transport;
// the session and splice tests use it as an agent's call.

import assert from 'node:assert/strict';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import type { AgentLink } from '../../pkg/tunnel/agent-link.js';

export class RecordingLink implements AgentLink {
  readonly data: Array<{ connectID: bigint; data: Buffer }> = [];
  readonly control: KnownPacket[] = [];
  pauses = 0;
  resumes = 0;
  /** While true, sendData callbacks wait in `pending` until releaseOne(). */
  holdCallbacks = false;
  private readonly pending: Array<(err?: Error | null) => void> = [];

  /** `mayClose`: the tunnel may close the link (a session's call); by default closing it fails the test. */
  constructor(private readonly opts: { mayClose?: boolean } = {}) {}

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    this.data.push({ connectID, data: Buffer.from(data) });
    if (this.holdCallbacks) this.pending.push(cb);
    else cb();
  }

  sendControl(packet: KnownPacket): boolean {
    this.control.push(packet);
    return true;
  }

  pauseReceive(_holder: object): void {
    this.pauses++;
  }

  resumeReceive(_holder: object): void {
    this.resumes++;
  }

  close(): void {
    if (this.opts.mayClose !== true) assert.fail('a connection closed the whole agent link');
  }

  get pendingCallbacks(): number {
    return this.pending.length;
  }

  releaseOne(): void {
    const cb = this.pending.shift();
    assert.ok(cb !== undefined, 'no sendData callback is waiting');
    cb();
  }

  sentBytes(): Buffer {
    return Buffer.concat(this.data.map((d) => d.data));
  }

  ofType(type: KnownPacket['type']): KnownPacket[] {
    return this.control.filter((p) => p.type === type);
  }
}
