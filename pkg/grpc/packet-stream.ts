// One `AgentService/Connect` call seen as a stream of packets, over a raw
// node:http2 stream: gRPC's 5-byte message framing, our protobuf codec, and
// back-pressure. Shared by the server (server-call.ts, which adds status
// trailers) and the agent (client-call.ts, which adds cancellation).
//
// DATA read by the agent into a pooled slab (mux/buffer-pool.ts) is written as
// one buffer: the framing goes in the room the slab leaves in front of the
// payload. Other DATA is written as two pieces — one small buffer holding the
// gRPC prefix and the packet header, then the payload untouched — so payloads
// are never copied on the way out (HTTP/2 still puts both in one frame, and TLS in one record,
// when they fit). Control packets are encoded with room for the prefix: one
// buffer each. On the way in, messages are views of what HTTP/2 delivered,
// except those that spanned chunks, which the deframer joins (one copy): a
// 64 KiB DATA message (always cut, HTTP/2 frames being 16 KiB) into a slab of
// the join pool, not a new external buffer for the GC. The stream holds that
// slab while the chunk's packets are handled and releases it after; a handler
// that keeps a view of the payload longer (the relay's queue, a socket write
// until its callback, a forward) retains it (buffer-pool.ts).
//
// The connections of the link share its send buffer fairly. A sender whose
// DATA finds the buffer below its limit goes on at once, so without a rule the
// connection whose socket the event loop happens to read first after each
// drain would fill the room the others left, every time (four bulk flows: one
// got 53 % of the link). So the buffer is shared in turns (from one release of
// the waiting senders to the next): in each turn a connection goes on at once
// until it has sent its share, the limit divided among the connections that
// sent in this turn or the last, less what it overran its share by in the
// last turn; then it waits with the others for the next turn. Within its
// share it goes on even past the limit (up to the limit and one more share),
// so that whoever is read last still gets its share: the buffer holds at most
// that much. The shares of a turn fill the limit, not more, and a turn ends
// only when waiters are released (a 'drain' with nobody waiting is no turn).
// Both matter on the agent: a relay released at a turn's end hands the link
// the read it holds and resumes its socket, whose next reads come on the next
// poll in the order the relays were released. When the shares (each one
// piece over) overfilled the buffer, and a drain with nobody waiting reset
// the counts so overruns were never paid back, the relay read last got one
// piece in before the buffer was full, was released last again, and stayed
// last: one of four bulk flows had 65–80 % of its share for the whole transfer.

import type { Duplex } from 'node:stream';
import { dataHeaderLength, encodeDataHeader, encodePacket, writeDataHeader } from '../protocol/codec.js';
import { decodePacket } from '../protocol/decode.js';
import { ProtocolError } from '../protocol/errors.js';
import { GRPC_FRAME_HEADER_SIZE, GrpcDeframer, type MessageBuffers, writeGrpcFrameHeader } from './frame.js';
import type { KnownPacket, Packet } from '../protocol/packet.js';
import type { Logger } from '../log/logger.js';
import type { PacketLink } from '../mux/packet-link.js';
import { errorFields } from './error-boundary.js';
import { PauseGate } from '../mux/pause-gate.js';
import { type BufferPool, messageJoinPool, releaseSlab, SLAB_HEADROOM, SLAB_SIZE, slabWithRoom, writeHolding } from '../mux/buffer-pool.js';

/** Connections counted in one turn of the send buffer at most (many small senders end a turn early instead). */
const MAX_TURN_SENDERS = 1024;

export interface GrpcPacketStreamHandlers {
  onPacket(packet: Packet): void;
  /** The call ended, for `reason`. Called once. */
  onClose(reason: string): void;
}

export interface GrpcPacketStreamOptions {
  /** Bytes queued on the HTTP/2 stream before DATA senders wait. Default 1 MiB. */
  sendBufferLimit?: number;
  /** Largest gRPC message accepted. Default 4 MiB (Go's default). */
  maxMessageSize?: number;
  /**
   * Bytes of control packets (everything but DATA) that may wait to be
   * written; a peer that lets more pile up is not reading and is cut off.
   * Default 1 MiB.
   */
  controlBufferLimit?: number;
  /** Called for each control packet refused because the peer does not read (for metrics). */
  onControlRefused?: () => void;
  /** Told of each packet written, by type (for metrics). */
  onPacketSent?: (type: KnownPacket['type']) => void;
  /** Where an error thrown by a packet handler is logged (with its stack) before the call is failed. */
  logger?: Logger;
  /** Told of every write and its completion (the ping policy forgives pings that follow our traffic). */
  writeTracker?: WriteTracker;
  /** Where messages that span HTTP/2 chunks are joined. Default: the process's messageJoinPool. */
  joinPool?: BufferPool;
  /**
   * Each chunk read is one whole message, without gRPC's 5-byte prefix (a
   * WebSocket's binary messages, ws-message-duplex.ts). Default false: a
   * gRPC byte stream, deframed here.
   */
  wholeMessages?: boolean;
}

/**
 * Joins a message at least half a slab long into a pooled slab (the message
 * at its start), a smaller or larger one into a Buffer of its own: a small
 * message that waits long in a slow reader's socket pins no 64 KiB.
 */
function pooledMessageBuffers(pool: BufferPool): MessageBuffers {
  return {
    take: (length) => (length >= SLAB_SIZE / 2 && length <= SLAB_SIZE ? pool.take().subarray(0, length) : Buffer.allocUnsafe(length)),
    drop: releaseSlab,
  };
}

/** Learns when DATA writes are queued and when HTTP/2 has written them out. */
export interface WriteTracker {
  writeQueued(): void;
  writeDone(): void;
  headersSent(): void;
}

export abstract class GrpcPacketStream implements PacketLink {
  private readonly deframer: GrpcDeframer;
  private readonly gate: PauseGate;
  private readonly sendBufferLimit: number;
  protected readonly writeTracker: WriteTracker | undefined;
  private readonly onWritten: (() => void) | undefined;
  private drainWaiters: Array<(err?: Error | null) => void> = [];
  /** DATA bytes each connection has sent in this turn of the send buffer. */
  private turn = new Map<bigint, number>();
  /** What each connection overran its share by in the last turn (paid back in this one). */
  private overran = new Map<bigint, number>();
  /** How many connections sent in the previous turn. */
  private lastTurnSenders = 1;
  private turnEndScheduled = false;
  private handlers: GrpcPacketStreamHandlers | undefined;
  private readonly log: Logger | undefined;
  private readonly controlBufferLimit: number;
  private readonly onControlRefused: (() => void) | undefined;
  private readonly onPacketSent: ((type: KnownPacket['type']) => void) | undefined;
  /** Control bytes handed to HTTP/2 and not yet written out. */
  private controlQueued = 0;
  private ended = false;
  private readonly wholeMessages: boolean;

  constructor(
    protected readonly stream: Duplex,
    opts: GrpcPacketStreamOptions = {},
  ) {
    this.deframer = new GrpcDeframer(opts.maxMessageSize, pooledMessageBuffers(opts.joinPool ?? messageJoinPool));
    this.sendBufferLimit = opts.sendBufferLimit ?? 1024 * 1024;
    this.writeTracker = opts.writeTracker;
    this.log = opts.logger;
    this.controlBufferLimit = opts.controlBufferLimit ?? 1024 * 1024;
    this.onControlRefused = opts.onControlRefused;
    this.onPacketSent = opts.onPacketSent;
    this.wholeMessages = opts.wholeMessages === true;
    const tracker = opts.writeTracker;
    this.onWritten = tracker === undefined ? undefined : () => tracker.writeDone();
    this.gate = new PauseGate(
      () => stream.pause(),
      () => stream.resume(),
    );
  }

  /** Starts reading packets. */
  start(handlers: GrpcPacketStreamHandlers): void {
    this.handlers = handlers;
    this.stream.on('data', this.onData);
    this.stream.on('drain', () => this.flushDrainWaiters());
  }

  /** The peer sent bytes that are not a packet: end the call, saying why. */
  protected abstract onProtocolError(err: ProtocolError): void;

  /** The peer lets control packets pile up unread: cut the call now. */
  protected abstract onOverloaded(message: string): void;

  /** A packet handler threw: end the call as failed on our side (it is logged already). */
  protected abstract onInternalError(message: string): void;

  /** Stops reading the call: no more packets, and HTTP/2 grants the peer no more window. */
  protected stopReading(): void {
    this.stream.off('data', this.onData);
    this.gate.clear();
    this.stream.pause();
  }

  /** Messages the deframer joined because they spanned chunks, and the bytes it copied (for the packet-path budget test). */
  get joined(): { messages: number; bytes: number } {
    return { messages: this.deframer.joinedMessages, bytes: this.deframer.copiedBytes };
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.ended) return;
    // Packets are decoded all first: a malformed one anywhere in the chunk ends the call before any is handled.
    const packets = this.decoded;
    try {
      if (this.wholeMessages) this.onMessage(chunk, false);
      else this.deframer.forEach(chunk, this.onMessage);
    } catch (err: unknown) {
      packets.length = 0;
      this.releaseJoined();
      this.onProtocolError(err instanceof ProtocolError ? err : new ProtocolError('YT_ERR_PROTOCOL_FRAME', String(err)));
      return;
    }
    try {
      this.dispatch(packets);
    } finally {
      packets.length = 0;
      // Whoever keeps a view of a joined message past its packet's handler has retained it.
      this.releaseJoined();
    }
  };

  private dispatch(packets: Packet[]): void {
    for (let i = 0; i < packets.length; i++) {
      const p = packets[i]!;
      if (this.ended) break;
      try {
        this.handlers?.onPacket(p);
      } catch (err: unknown) {
        // The boundary: a handler's bug fails this call, never the process.
        this.log?.error('internal error handling a packet; ending the call', { packetType: p.type, ...errorFields(err) });
        this.stopReading();
        this.onInternalError(`internal error handling a ${p.type} packet`);
        break;
      }
    }
  }

  /** Packets of the chunk being handled (reused: no array per chunk). */
  private readonly decoded: Packet[] = [];
  /** Messages of the chunk being handled that were joined into buffers of ours (pooled slabs), held until its packets are handled. */
  private readonly joinedMessages: Buffer[] = [];
  private readonly onMessage = (message: Buffer, joined: boolean): void => {
    if (joined) this.joinedMessages.push(message);
    this.decoded.push(decodePacket(message));
  };

  private releaseJoined(): void {
    const held = this.joinedMessages;
    for (let i = 0; i < held.length; i++) releaseSlab(held[i]!);
    held.length = 0;
  }

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    if (this.ended) {
      cb(new Error('the tunnel stream is closed'));
      return;
    }
    const { stream } = this;
    this.writeTracker?.writeQueued();
    this.onPacketSent?.('DATA');
    const slab = slabWithRoom(data);
    if (slab !== undefined) {
      // A target read in a pooled slab: the framing goes in the room in front,
      // and the message is one buffer. The slab goes back only once HTTP/2 is done with it.
      const headerLength = GRPC_FRAME_HEADER_SIZE + dataHeaderLength(connectID, data.length);
      const start = SLAB_HEADROOM - headerLength;
      writeGrpcFrameHeader(slab.subarray(start), headerLength - GRPC_FRAME_HEADER_SIZE + data.length);
      writeDataHeader(slab, start + GRPC_FRAME_HEADER_SIZE, connectID, data.length);
      writeHolding(stream, slab.subarray(start, SLAB_HEADROOM + data.length), data, this.onWritten);
    } else {
      const header = encodeDataHeader(connectID, data.length, GRPC_FRAME_HEADER_SIZE);
      writeGrpcFrameHeader(header, header.length - GRPC_FRAME_HEADER_SIZE + data.length);
      stream.cork();
      stream.write(header);
      // A later piece of a pooled slab (bytes in front of it) is held the same way.
      writeHolding(stream, data, data, this.onWritten);
      stream.uncork();
    }
    if (this.turn.size >= MAX_TURN_SENDERS && !this.turn.has(connectID)) this.endTurn();
    const sent = (this.turn.get(connectID) ?? 0) + data.length;
    this.turn.set(connectID, sent);
    const share = this.share();
    const limit = this.sendBufferLimit;
    // Alone on the link (the share is the whole limit), only the limit applies, as it always did.
    const shareUsed = share < limit && sent + (this.overran.get(connectID) ?? 0) >= share;
    if (shareUsed || stream.writableLength > (share < limit ? limit + share : limit)) {
      // 'drain' releases it, or the end of the turn if the buffer is below its limit then.
      this.drainWaiters.push(cb);
      this.scheduleTurnEnd();
    } else {
      cb();
    }
  }

  /** Ends the turn soon (after the I/O already due, so that every sender with data has had its share). */
  private scheduleTurnEnd(): void {
    if (this.turnEndScheduled) return;
    this.turnEndScheduled = true;
    setImmediate(this.onTurnEnd);
  }

  private readonly onTurnEnd = (): void => {
    this.turnEndScheduled = false;
    // Over the limit, 'drain' will come: it ends the turn.
    if (this.stream.writableLength <= this.sendBufferLimit) this.flushDrainWaiters();
  };

  private share(): number {
    // Whole bytes: a fraction would turn V8's integer code for this into floating point ("lost precision") on the first turn shared by three.
    return Math.floor(this.sendBufferLimit / Math.max(this.lastTurnSenders, this.turn.size));
  }

  private endTurn(): void {
    const share = this.share();
    const overran = this.overran;
    const next = new Map<bigint, number>();
    for (const [id, sent] of this.turn) {
      const over = Math.min(share, sent + (overran.get(id) ?? 0) - share);
      if (over > 0) next.set(id, over);
    }
    this.overran = next;
    this.lastTurnSenders = Math.max(1, this.turn.size);
    this.turn.clear();
  }

  sendControl(packet: KnownPacket): boolean {
    if (this.ended) return false;
    const message = encodePacket(packet, GRPC_FRAME_HEADER_SIZE);
    const size = message.length;
    if (this.controlQueued + size > this.controlBufferLimit) {
      this.onControlRefused?.();
      this.log?.warn('the peer does not read its call; cutting it off', { queuedControlBytes: this.controlQueued, packetType: packet.type });
      this.onOverloaded(`the peer does not read: ${this.controlQueued} bytes of control packets wait to be written (limit ${this.controlBufferLimit})`);
      return false;
    }
    this.controlQueued += size;
    this.writeTracker?.writeQueued();
    this.onPacketSent?.(packet.type);
    writeGrpcFrameHeader(message, size - GRPC_FRAME_HEADER_SIZE);
    this.stream.write(message, () => {
      this.controlQueued -= size;
      this.onWritten?.();
    });
    return true;
  }

  pauseReceive(holder: object): void {
    this.gate.hold(holder);
  }

  resumeReceive(holder: object): void {
    if (!this.ended) this.gate.release(holder);
  }

  get isEnded(): boolean {
    return this.ended;
  }

  /** Marks the call over: waiting senders fail, packets stop, onClose runs once. */
  protected finish(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    this.deframer.close();
    this.gate.clear();
    this.flushDrainWaiters(new Error(`the tunnel stream closed: ${reason}`));
    this.handlers?.onClose(reason);
  }

  /** Ends the turn and releases the waiting senders, unless nobody waits or the buffer is over its limit ('drain' will come). */
  private flushDrainWaiters(err?: Error): void {
    if (!err && (this.drainWaiters.length === 0 || this.stream.writableLength > this.sendBufferLimit)) return;
    this.endTurn();
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const cb of waiters) cb(err ?? null);
  }
}
