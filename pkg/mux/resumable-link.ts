// A session's packet link that outlives the transport it rides on (session
// resume, proto/yurttunnel_ext.proto). Connections write to it as to any
// PacketLink; it numbers what they send, keeps it until the peer acknowledges
// it (ResendBuffer), and passes it to the current transport, an agent's gRPC
// call. When that call drops without a goodbye the owner detaches it: the
// connections and their tables stay, sends are kept and their writers held
// (back-pressure, as a full stream would). When the agent comes back on a new
// call the owner attaches it with the peer's count of packets received: what
// the peer lacks is resent in order, the writers go on, and the peer sees every
// packet once, in order, as if the call had never dropped.
//
// Acknowledgements ride on WINDOW_UPDATE (`received`, our count of numbered
// packets received): on those flow control sends anyway, and, when none has
// gone for a while, on one of our own with connectID 0, which is not numbered.
//
// On the server the links share a ResumeBudget (resume-budget.ts): once it is
// spent, the writers of a link keeping its share of it wait as they do at the
// per-link cap, until acknowledgements (its own or any link's) or an ended
// session make room.
//
// What crosses to the owner: packets from the current transport, in order
// (`receive`); nothing from a transport once it is detached, so the count
// given at a resume is exactly what was handled.

import { ConnectionClosedError, ResumeError, type TunnelError } from '../protocol/errors.js';
import type { KnownPacket, Packet } from '../protocol/packet.js';
import type { PacketLink } from './packet-link.js';
import { ResendBuffer } from './resend-buffer.js';
import type { ResumeBudget } from './resume-budget.js';

export interface ResumableLinkOptions {
  /** Each numbered packet received, once, in order. */
  onPacket(packet: Packet): void;
  /**
   * The session cannot go on: the peer acknowledged packets never sent, or
   * leaves control packets unacknowledged past the limit. Called once; the
   * owner ends the session (and calls close()).
   */
  onBroken(err: ResumeError): void;
  /** DATA bytes kept unacknowledged before writers wait. Default 32 MiB (resend-buffer.ts says why). */
  maxDataBytes?: number;
  /** Control packets kept unacknowledged before the session is broken. Default 65,536. */
  maxControlPackets?: number;
  /** The server-wide budget for DATA kept unacknowledged, shared with every other link (none: only the per-link cap). */
  budget?: ResumeBudget;
  /** Acknowledge after this many packets received. Default 64. */
  ackEveryPackets?: number;
  /** ...or this many DATA bytes received. Default 1 MiB. */
  ackEveryBytes?: number;
  /** ...or this long after the first packet not yet acknowledged. Default 50 ms. */
  ackDelayMs?: number;
}

type WriteCallback = (err?: Error | null) => void;

/** One transport while it is attached. */
interface Attachment {
  transport: PacketLink;
  /** Replayed DATA packets whose transport callback has not come yet. */
  replaysPending: number;
  /** The replay is under way: held writers wait for its end, or what they send would be among it. */
  replaying: boolean;
}

export class ResumableLink implements PacketLink {
  private readonly opts: ResumableLinkOptions;
  private readonly buffer: ResendBuffer;
  private current: Attachment | undefined;
  /** Numbered packets received and handed to onPacket. */
  private receivedCount = 0;
  /** receivedCount when we last told the peer. */
  private ackedCount = 0;
  private unackedBytes = 0;
  private ackTimer: NodeJS.Timeout | undefined;
  /** Writers held while no transport is attached (or the one they used failed). */
  private held: WriteCallback[] = [];
  /** Writers held until acknowledgements make room in the buffer, or in the budget. */
  private waitingForRoom: WriteCallback[] = [];
  private readonly budget: ResumeBudget | undefined;
  /** Whoever asked that receiving pause, re-applied to each new transport. */
  private readonly pauseHolders = new Set<object>();
  private closed = false;
  private broken = false;
  private resent = { packets: 0, bytes: 0 };
  private readonly ackEveryPackets: number;
  private readonly ackEveryBytes: number;
  private readonly ackDelayMs: number;

  constructor(opts: ResumableLinkOptions) {
    this.opts = opts;
    this.budget = opts.budget;
    this.buffer = new ResendBuffer({ maxDataBytes: opts.maxDataBytes, maxControlPackets: opts.maxControlPackets, budget: opts.budget });
    this.ackEveryPackets = opts.ackEveryPackets ?? 64;
    this.ackEveryBytes = opts.ackEveryBytes ?? 1024 * 1024;
    this.ackDelayMs = opts.ackDelayMs ?? 50;
  }

  /** Numbered packets received so far: what the peer resends after, on a resume. */
  get received(): number {
    return this.receivedCount;
  }

  get attached(): boolean {
    return this.current !== undefined;
  }

  /** Detached and not closed: the session waits for its next transport. */
  get suspended(): boolean {
    return this.current === undefined && !this.closed;
  }

  /** Packets and DATA bytes resent on resumes so far. */
  get resentPackets(): number {
    return this.resent.packets;
  }

  get resentBytes(): number {
    return this.resent.bytes;
  }

  /** Packets sent and not yet acknowledged, and their DATA bytes (for /debug and tests). */
  get unacknowledged(): { packets: number; dataBytes: number } {
    return { packets: this.buffer.length, dataBytes: this.buffer.dataBytes };
  }

  /**
   * Whether the session can resume from the peer's count `peerReceived`
   * (what attach() would accept): check it before answering a resume, since
   * the answer goes out before the replay.
   */
  canResume(peerReceived: number): boolean {
    if (this.closed) return false;
    try {
      this.buffer.checkResumeCount(peerReceived);
      return true;
    } catch (err: unknown) {
      if (err instanceof ResumeError) return false;
      throw err;
    }
  }

  /**
   * Carries the session on `transport` from now on. `peerReceived` is the
   * peer's count of our packets it has received (0 for a new session); every
   * packet after it is resent first, in order. Throws a ResumeError
   * (YT_ERR_RESUME_BAD_COUNT) when the peer cannot truly have that count: the
   * session cannot resume. A transport still attached is detached first.
   */
  attach(transport: PacketLink, peerReceived: number): void {
    if (this.closed) throw new ResumeError('YT_ERR_RESUME_BAD_COUNT', 'the session is closed; it cannot resume');
    this.detach();
    this.buffer.checkResumeCount(peerReceived);
    this.buffer.acknowledge(peerReceived);
    const att: Attachment = { transport, replaysPending: 0, replaying: true };
    this.current = att;
    for (const holder of this.pauseHolders) transport.pauseReceive(holder);
    // The peer learns our count from the resume itself.
    this.ackedCount = this.receivedCount;
    this.unackedBytes = 0;
    this.buffer.replay(
      peerReceived,
      (connectID, data) => {
        att.replaysPending++;
        this.resent.packets++;
        this.resent.bytes += data.length;
        transport.sendData(connectID, data, () => {
          if (--att.replaysPending === 0 && !att.replaying && this.current === att) this.releaseHeld();
        });
      },
      (packet) => {
        this.resent.packets++;
        transport.sendControl(this.withAck(packet));
      },
    );
    att.replaying = false;
    // Held writers go on once the transport has taken the replay (its last DATA callback).
    if (att.replaysPending === 0) this.releaseHeld();
  }

  /** The transport is gone (or going): keep everything, send nothing, hold the writers. Idempotent. */
  detach(): void {
    if (this.current === undefined) return;
    this.current = undefined;
    clearTimeout(this.ackTimer);
    this.ackTimer = undefined;
  }

  /**
   * A packet from `from`. Ignored unless `from` is the attached transport, so
   * that nothing a dropped call still delivers is taken after a resume.
   */
  receive(from: PacketLink, packet: Packet): void {
    if (this.closed || this.current?.transport !== from) return;
    if (packet.type === 'WINDOW_UPDATE') {
      if (packet.received !== undefined && !this.acknowledged(packet.received)) return;
      // An acknowledgement alone: not numbered, nothing for the connections.
      if (packet.connectID === 0n) return;
    }
    this.receivedCount++;
    if (packet.type === 'DATA') this.unackedBytes += packet.data.length;
    // Handled first: a WINDOW_UPDATE it makes flow control send carries the
    // acknowledgement, and then none is due alone (in bulk, one fewer control
    // packet per MiB each way).
    this.opts.onPacket(packet);
    this.scheduleAck();
  }

  sendData(connectID: bigint, data: Buffer, cb: WriteCallback): void {
    if (this.closed) {
      cb(new ConnectionClosedError('the tunnel session is closed'));
      return;
    }
    this.buffer.appendData(connectID, data);
    const att = this.current;
    if (att === undefined) {
      this.held.push(cb);
      return;
    }
    att.transport.sendData(connectID, data, (err) => this.afterSend(att, cb, err));
  }

  sendControl(packet: KnownPacket): boolean {
    if (this.closed) return false;
    if (packet.type === 'WINDOW_UPDATE' && packet.connectID === 0n) {
      // The peer would not number it, and the counts would part.
      throw new TypeError('a WINDOW_UPDATE for connectID 0 is an acknowledgement; only the link sends those');
    }
    try {
      this.buffer.appendControl(packet);
    } catch (err: unknown) {
      if (!(err instanceof ResumeError)) throw err;
      this.breakSession(err);
      return false;
    }
    // Kept for the peer either way: a transport that refuses it will be replaced, or the session ends.
    this.current?.transport.sendControl(this.withAck(packet));
    return true;
  }

  pauseReceive(holder: object): void {
    this.pauseHolders.add(holder);
    this.current?.transport.pauseReceive(holder);
  }

  resumeReceive(holder: object): void {
    this.pauseHolders.delete(holder);
    this.current?.transport.resumeReceive(holder);
  }

  /** Ends the session: lets every packet go and fails held writers with `err`. Idempotent. */
  close(err: TunnelError | Error = new ConnectionClosedError('the tunnel session is closed')): void {
    if (this.closed) return;
    this.closed = true;
    this.detach();
    this.buffer.clear();
    this.budget?.cancelWait(this.onBudgetRoom);
    this.pauseHolders.clear();
    const waiting = [...this.held, ...this.waitingForRoom];
    this.held = [];
    this.waitingForRoom = [];
    for (const cb of waiting) cb(err);
  }

  /** What the transport said of a DATA packet: room for more, or that it failed. */
  private afterSend(att: Attachment, cb: WriteCallback, err: Error | null | undefined): void {
    if (this.closed) {
      cb(err ?? new ConnectionClosedError('the tunnel session is closed'));
      return;
    }
    if (err) {
      // The packet is kept. On a transport attached since, it has been resent already: go on.
      if (this.current !== undefined && this.current !== att) cb();
      else this.held.push(cb);
      return;
    }
    if (this.mustWait()) this.waitForRoom(cb);
    else cb();
  }

  /** What is kept has reached the link's cap, or its share of the server's spent budget: writers wait. */
  private mustWait(): boolean {
    return this.buffer.full || this.buffer.overBudget;
  }

  private waitForRoom(cb: WriteCallback): void {
    this.waitingForRoom.push(cb);
    this.waitForBudget();
  }

  /** At the link's cap only its own acknowledgements make room; else, with the budget spent, the budget wakes us. */
  private waitForBudget(): void {
    if (!this.buffer.full && this.buffer.overBudget) this.budget?.waitForRoom(this.onBudgetRoom);
  }

  private readonly onBudgetRoom = (): void => {
    // A suspended link's writers wait for its transport (attach releases them).
    if (this.current !== undefined) this.releaseWaiting();
  };

  private releaseHeld(): void {
    const held = this.held;
    this.held = [];
    for (const cb of held) {
      if (this.mustWait()) this.waitForRoom(cb);
      else cb();
    }
    // The resume may have acknowledged all they waited for: no acknowledgement will come to release them.
    this.releaseWaiting();
  }

  private releaseWaiting(): void {
    if (this.waitingForRoom.length === 0) return;
    if (this.mustWait()) {
      this.waitForBudget();
      return;
    }
    const waiting = this.waitingForRoom;
    this.waitingForRoom = [];
    for (const cb of waiting) {
      // A released writer may fill the buffer or the budget again.
      if (this.mustWait()) this.waitForRoom(cb);
      else cb();
    }
  }

  /** The peer has received our packets below `count`. False if the session broke on it. */
  private acknowledged(count: bigint): boolean {
    try {
      this.buffer.acknowledge(Number(count));
    } catch (err: unknown) {
      if (!(err instanceof ResumeError)) throw err;
      this.breakSession(err);
      return false;
    }
    this.releaseWaiting();
    return true;
  }

  /**
   * Acknowledges at once past a count of packets or bytes, else soon. One
   * timer per link, left running when an acknowledgement goes out (it then
   * finds nothing to do): setting and clearing one per acknowledgement cost
   * more than the acknowledgement itself.
   */
  private scheduleAck(): void {
    if (this.current === undefined || this.receivedCount === this.ackedCount) return;
    if (this.receivedCount - this.ackedCount >= this.ackEveryPackets || this.unackedBytes >= this.ackEveryBytes) {
      this.sendAck();
      return;
    }
    if (this.ackTimer === undefined) {
      this.ackTimer = setTimeout(() => {
        this.ackTimer = undefined;
        this.sendAck();
      }, this.ackDelayMs);
      this.ackTimer.unref();
    }
  }

  private sendAck(): void {
    const att = this.current;
    if (att === undefined || this.receivedCount === this.ackedCount) return;
    att.transport.sendControl(this.withAck({ type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n }));
  }

  /** A WINDOW_UPDATE goes out carrying our count: that acknowledges everything so far. */
  private withAck(packet: KnownPacket): KnownPacket {
    if (packet.type !== 'WINDOW_UPDATE') return packet;
    this.ackedCount = this.receivedCount;
    this.unackedBytes = 0;
    return { type: 'WINDOW_UPDATE', connectID: packet.connectID, bytes: packet.bytes, received: BigInt(this.receivedCount) };
  }

  private breakSession(err: ResumeError): void {
    if (this.broken) return;
    this.broken = true;
    this.opts.onBroken(err);
  }
}
