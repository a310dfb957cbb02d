// One agent's `AgentService/Connect` call, seen as a stream of packets. We
// terminate HTTP/2 ourselves (see agent-endpoint.ts), so this class does
// gRPC's message framing: 5-byte prefix, protobuf Packet, status in trailers.

import type { ServerHttp2Stream } from 'node:http2';
import { encodeDataHeader, encodePacket, decodePacket } from '../protocol/codec.js';
import { ProtocolError } from '../protocol/errors.js';
import { GRPC_FRAME_HEADER_SIZE, GrpcDeframer, grpcFrameHeader, writeGrpcFrameHeader } from '../protocol/grpc-frame.js';
import type { KnownPacket, Packet } from '../protocol/packet.js';
import type { PacketLink } from '../mux/packet-link.js';
import { PauseGate } from '../mux/pause-gate.js';

/** gRPC status codes we send. */
export const GrpcStatus = {
  OK: 0,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  UNAUTHENTICATED: 16,
} as const;

export interface AgentStreamHandlers {
  onPacket(packet: Packet): void;
  /** The call ended, for `reason`. Called once. */
  onClose(reason: string): void;
}

export interface AgentStreamOptions {
  /** Bytes queued on the HTTP/2 stream before DATA senders wait. Default 1 MiB. */
  sendBufferLimit?: number;
  maxMessageSize?: number;
  /** Called on every send (keepalive policy wants to know about our traffic). */
  onSend?: () => void;
}

/**
 * Percent-encodes a grpc-message value as the gRPC spec asks: UTF-8 bytes
 * outside printable ASCII, and '%' itself, become %XX; the rest stays.
 */
export function encodeGrpcMessage(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

export class AgentStream implements PacketLink {
  private readonly deframer: GrpcDeframer;
  private readonly gate: PauseGate;
  private readonly sendBufferLimit: number;
  private readonly onSend: (() => void) | undefined;
  private drainWaiters: Array<(err?: Error | null) => void> = [];
  private handlers: AgentStreamHandlers | undefined;
  private ended = false;
  private endStatus: { code: number; message: string } | undefined;

  constructor(
    private readonly stream: ServerHttp2Stream,
    opts: AgentStreamOptions = {},
  ) {
    this.deframer = new GrpcDeframer(opts.maxMessageSize);
    this.sendBufferLimit = opts.sendBufferLimit ?? 1024 * 1024;
    this.onSend = opts.onSend;
    this.gate = new PauseGate(
      () => stream.pause(),
      () => stream.resume(),
    );
  }

  /** Starts reading packets. Headers must have been sent already. */
  start(handlers: AgentStreamHandlers): void {
    this.handlers = handlers;
    const { stream } = this;
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    stream.on('drain', () => this.flushDrainWaiters());
    stream.on('wantTrailers', () => {
      const s = this.endStatus ?? { code: GrpcStatus.OK, message: '' };
      const trailers: Record<string, string> = { 'grpc-status': String(s.code) };
      if (s.message !== '') trailers['grpc-message'] = encodeGrpcMessage(s.message);
      stream.sendTrailers(trailers);
    });
    // The agent half-closed: a gRPC bidi call is over for us too.
    stream.on('end', () => this.finish(GrpcStatus.OK, '', 'agent ended the stream'));
    stream.on('close', () => this.finish(GrpcStatus.UNAVAILABLE, '', this.closeReason()));
    stream.on('error', () => {
      // 'close' follows and reports; the error itself is in closeReason().
    });
  }

  private closeReason(): string {
    const code = this.stream.rstCode;
    if (code !== undefined && code !== 0) return `stream reset (HTTP/2 error code ${code})`;
    return this.stream.session?.destroyed ? 'connection closed' : 'stream closed';
  }

  private onData(chunk: Buffer): void {
    let messages: Buffer[];
    let packets: Packet[];
    try {
      messages = this.deframer.push(chunk);
      packets = messages.map(decodePacket);
    } catch (err: unknown) {
      const perr = err instanceof ProtocolError ? err : new ProtocolError('YT_ERR_PROTOCOL_FRAME', String(err));
      const code = perr.code === 'YT_ERR_PROTOCOL_TOO_LARGE' ? GrpcStatus.RESOURCE_EXHAUSTED : GrpcStatus.INTERNAL;
      this.end(code, perr.message);
      return;
    }
    for (const p of packets) {
      if (this.ended) return;
      this.handlers?.onPacket(p);
    }
  }

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    if (this.ended) {
      cb(new Error('agent stream is closed'));
      return;
    }
    // One small buffer holds the gRPC prefix and the packet header; the payload follows uncopied.
    const header = encodeDataHeader(connectID, data.length, GRPC_FRAME_HEADER_SIZE);
    writeGrpcFrameHeader(header, header.length - GRPC_FRAME_HEADER_SIZE + data.length);
    const { stream } = this;
    this.onSend?.();
    stream.cork();
    stream.write(header);
    stream.write(data);
    stream.uncork();
    if (stream.writableLength <= this.sendBufferLimit) cb();
    else this.drainWaiters.push(cb);
  }

  sendControl(packet: KnownPacket): boolean {
    if (this.ended) return false;
    const body = encodePacket(packet);
    this.onSend?.();
    this.stream.write(Buffer.concat([grpcFrameHeader(body.length), body]));
    return true;
  }

  pauseReceive(holder: object): void {
    this.gate.hold(holder);
  }

  resumeReceive(holder: object): void {
    if (this.ended) return;
    this.gate.release(holder);
  }

  /** Bytes waiting in the HTTP/2 stream's send buffer. */
  get queuedBytes(): number {
    return this.stream.writableLength;
  }

  get isEnded(): boolean {
    return this.ended;
  }

  /** Ends the call with a gRPC status (sent in the trailers). */
  end(code: number, message: string): void {
    if (this.ended) return;
    this.endStatus = { code, message };
    const reason = message === '' ? `ended with gRPC status ${code}` : message;
    this.finish(code, message, reason);
    const { stream } = this;
    if (!stream.closed && !stream.destroyed) {
      stream.resume();
      stream.end();
      // A peer that never reads its trailers must not hold the stream.
      const timer = setTimeout(() => stream.close(), 5000);
      timer.unref();
      stream.once('close', () => clearTimeout(timer));
    }
  }

  private finish(code: number, message: string, reason: string): void {
    if (this.ended) return;
    this.ended = true;
    if (this.endStatus === undefined) this.endStatus = { code, message };
    this.gate.clear();
    this.flushDrainWaiters(new Error(`agent stream closed: ${reason}`));
    this.handlers?.onClose(reason);
    if (code === GrpcStatus.OK && !this.stream.closed && !this.stream.destroyed && this.stream.writable) {
      // The agent half-closed: answer with OK trailers.
      this.stream.end();
    }
  }

  private flushDrainWaiters(err?: Error): void {
    if (!err && this.stream.writableLength > this.sendBufferLimit) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const cb of waiters) cb(err ?? null);
  }
}
