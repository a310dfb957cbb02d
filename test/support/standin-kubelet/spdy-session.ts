// One SPDY/3.1 session over an upgraded connection, for either side: opens
// and accepts streams, relays DATA/FIN/RST, answers PING, sends and honours
// GOAWAY. Like Go's spdystream (what kubectl and the kubelet use) it does no
// flow control: WINDOW_UPDATE and SETTINGS are read and ignored, and
// back-pressure is TCP's (a stream whose reader lags pauses the socket).

import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../../pkg/log/logger.js';
import { silentLogger } from '../../../pkg/log/logger.js';
import { SpdyProtocolError, SpdySessionClosedError, StandinTimeoutError, errorMessage } from './errors.js';
import {
  GOAWAY_STATUS,
  RST_STATUS,
  SpdyFrameParser,
  encodeDataHeader,
  encodeGoAway,
  encodePing,
  encodeRstStream,
  encodeSynReply,
  encodeSynStream,
  type SpdyFrame,
} from './spdy-frames.js';
import { HeaderCompressor, HeaderDecompressor, type SpdyHeaders } from './spdy-headers.js';
import { SpdyStream, type StreamHost } from './spdy-stream.js';

export interface SpdySessionOptions {
  /** A client opens odd stream ids, a server even ones. */
  role: 'client' | 'server';
  /** Largest frame accepted; default 1 MiB (Go peers send at most 32 KiB of DATA at a time). */
  maxFrameBytes?: number;
  /** Outgoing DATA is cut into frames of at most this size; default 32 KiB. */
  dataFrameBytes?: number;
  /** Streams open at once before new ones are refused; default 1000. */
  maxStreams?: number;
  /** After close(), how long to wait for the peer before destroying the socket; default 2000 ms. */
  closeTimeoutMs?: number;
  logger?: Logger;
}

interface PendingPing {
  started: number;
  resolve: (rttMs: number) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * Events: 'stream' (SpdyStream opened by the peer; call reply() or reset()),
 * 'goaway' ({ lastGoodStreamId, status }), 'protocolError' (Error), 'close'.
 */
export class SpdySession extends EventEmitter {
  private readonly parser: SpdyFrameParser;
  private readonly compressor = new HeaderCompressor();
  private readonly decompressor = new HeaderDecompressor();
  private readonly streams = new Map<number, SpdyStream>();
  private readonly blocked = new Set<SpdyStream>();
  private readonly pings = new Map<number, PendingPing>();
  private readonly inbox: SpdyFrame[] = [];
  private drainWaiters: Array<(err?: Error) => void> = [];
  private readonly dataFrameBytes: number;
  private readonly maxStreams: number;
  private readonly closeTimeoutMs: number;
  private readonly log: Logger;
  private nextStreamId: number;
  /** Low bit of the stream ids the peer opens. */
  private readonly peerParity: number;
  private nextPingId: number;
  private lastPeerStreamId = 0;
  private decoding = false;
  private paused = false;
  private goAwaySent = false;
  private goAwayReceived = false;
  private failed = false;
  private isClosed = false;
  private closeTimer: NodeJS.Timeout | null = null;
  private readonly host: StreamHost;

  /** Call receive(head) with any bytes that arrived with the upgrade, once the 'stream' handler is in place. */
  constructor(
    private readonly socket: Duplex,
    opts: SpdySessionOptions,
  ) {
    super();
    this.parser = new SpdyFrameParser(opts.maxFrameBytes ?? 1024 * 1024);
    this.dataFrameBytes = opts.dataFrameBytes ?? 32 * 1024;
    this.maxStreams = opts.maxStreams ?? 1000;
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 2000;
    this.log = opts.logger ?? silentLogger();
    this.nextStreamId = opts.role === 'client' ? 1 : 2;
    this.nextPingId = opts.role === 'client' ? 1 : 2;
    this.peerParity = opts.role === 'client' ? 0 : 1;
    this.host = this.makeHost();
    socket.on('data', this.onSocketData);
    socket.on('drain', this.onDrain);
    socket.on('end', this.onSocketEnd);
    socket.on('error', this.onSocketError);
    socket.once('close', this.onSocketClose);
  }

  /** Feeds bytes read elsewhere (e.g. the `head` of an upgrade) as if they came from the socket. */
  receive(chunk: Buffer): void {
    if (chunk.length > 0) this.onSocketData(chunk);
  }

  get closed(): boolean {
    return this.isClosed;
  }

  get openStreams(): number {
    return this.streams.size;
  }

  /** Opens a stream and resolves once the peer's SYN_REPLY arrives. */
  openStream(headers: SpdyHeaders, opts: { fin?: boolean; timeoutMs?: number } = {}): Promise<SpdyStream> {
    if (this.isClosed || this.goAwaySent || this.goAwayReceived) {
      return Promise.reject(new SpdySessionClosedError('cannot open a SPDY stream: the session is closing'));
    }
    const id = this.nextStreamId;
    if (id > 0x7fffffff) return Promise.reject(new SpdySessionClosedError('SPDY stream ids are used up; open a new session'));
    this.nextStreamId += 2;
    const stream = new SpdyStream(this.host, id, true, {});
    this.streams.set(id, stream);
    if (opts.fin === true) stream.localFin = true;
    this.writeFrame(encodeSynStream(id, this.compressor.compress(headers), { fin: opts.fin === true }));
    if (opts.fin === true) stream.end();
    const timeoutMs = opts.timeoutMs ?? 5000;
    return new Promise((resolve, reject) => {
      const done = (err: Error | null): void => {
        clearTimeout(timer);
        stream.removeListener('reply', onReply);
        stream.removeListener('close', onClose);
        if (err === null) resolve(stream);
        else reject(err);
      };
      const onReply = (): void => done(null);
      const onClose = (): void => done(new SpdySessionClosedError(`SPDY stream ${id} closed before its SYN_REPLY (status ${String(stream.resetStatus)})`));
      const timer = setTimeout(() => {
        done(new StandinTimeoutError(`no SYN_REPLY for SPDY stream ${id} after ${timeoutMs} ms`));
        stream.reset();
      }, timeoutMs);
      timer.unref();
      stream.once('reply', onReply);
      stream.once('close', onClose);
      // Errors reach the caller through the rejection; a listener keeps them from being unhandled meanwhile.
      stream.once('error', () => undefined);
    });
  }

  /** Sends a PING and resolves with the round trip in ms. */
  ping(timeoutMs = 5000): Promise<number> {
    if (this.isClosed) return Promise.reject(new SpdySessionClosedError('cannot ping: the SPDY session is closed'));
    const id = this.nextPingId;
    this.nextPingId = (this.nextPingId + 2) >>> 0;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pings.delete(id);
        reject(new StandinTimeoutError(`no PING reply for id ${id} after ${timeoutMs} ms`));
      }, timeoutMs);
      timer.unref();
      this.pings.set(id, { started: performance.now(), resolve, reject, timer });
      this.writeFrame(encodePing(id));
    });
  }

  /** Sends GOAWAY (OK) and ends the connection; the socket is destroyed if the peer has not closed within closeTimeoutMs. */
  close(status: number = GOAWAY_STATUS.ok): void {
    if (this.isClosed) return;
    if (!this.goAwaySent && this.socket.writable) {
      this.goAwaySent = true;
      this.socket.write(encodeGoAway(this.lastPeerStreamId, status));
    }
    this.socket.end();
    if (this.closeTimer === null) {
      this.closeTimer = setTimeout(() => this.socket.destroy(), this.closeTimeoutMs);
      this.closeTimer.unref();
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  private makeHost(): StreamHost {
    // Arrow functions keep `this`; the object is the only way streams reach the session.
    return {
      writeData: (id, chunk, fin, cb) => this.writeData(id, chunk, fin, cb),
      writeReply: (id, headers) => this.writeFrame(encodeSynReply(id, this.compressor.compress(headers))),
      writeRst: (id, status) => this.writeFrame(encodeRstStream(id, status)),
      block: (s) => {
        this.blocked.add(s);
        this.updateFlow();
      },
      unblock: (s) => {
        if (this.blocked.delete(s)) this.updateFlow();
      },
      forget: (s) => {
        if (this.streams.get(s.id) === s) this.streams.delete(s.id);
        if (this.blocked.delete(s)) this.updateFlow();
      },
      isGone: () => this.socketGone,
    };
  }

  private get socketGone(): boolean {
    return this.isClosed || !this.socket.writable;
  }

  private writeFrame(frame: Buffer): boolean {
    if (this.socketGone) return false;
    return this.socket.write(frame);
  }

  private writeData(id: number, chunk: Buffer, fin: boolean, cb: (err?: Error) => void): void {
    if (this.socketGone) {
      cb(new SpdySessionClosedError(`cannot write to SPDY stream ${id}: the session is closed`));
      return;
    }
    let ok = true;
    if (chunk.length === 0) {
      ok = this.socket.write(encodeDataHeader(id, 0, fin));
    } else {
      for (let pos = 0; pos < chunk.length; pos += this.dataFrameBytes) {
        const part = chunk.subarray(pos, pos + this.dataFrameBytes);
        const last = pos + part.length >= chunk.length;
        this.socket.write(encodeDataHeader(id, part.length, fin && last));
        ok = this.socket.write(part);
      }
    }
    if (ok) cb();
    else this.drainWaiters.push(cb);
  }

  private readonly onDrain = (): void => {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const cb of waiters) cb();
  };

  private readonly onSocketData = (chunk: Buffer): void => {
    if (this.failed) return;
    try {
      for (const f of this.parser.push(chunk)) this.inbox.push(f);
      this.pump();
    } catch (err: unknown) {
      // Malformed input, or a stream listener that threw: either way this session cannot go on.
      this.fail(err);
    }
  };

  // Frames are handled strictly in order; a header block is inflated
  // asynchronously, and everything behind it waits (the socket is paused).
  private pump(): void {
    while (!this.decoding && !this.failed && !this.isClosed && this.inbox.length > 0) {
      const frame = this.inbox.shift()!;
      if ((frame.type === 'SYN_STREAM' || frame.type === 'SYN_REPLY' || frame.type === 'HEADERS') && frame.headerBlock.length > 0) {
        this.decoding = true;
        this.decompressor
          .decompress(frame.headerBlock)
          .then((headers) => {
            this.decoding = false;
            if (this.failed || this.isClosed) return;
            this.dispatch(frame, headers);
            this.pump();
          })
          .catch((err: unknown) => this.fail(err));
        break;
      }
      this.dispatch(frame, {});
    }
    this.updateFlow();
  }

  private updateFlow(): void {
    if (this.isClosed) return;
    const stop = this.decoding || this.blocked.size > 0 || this.inbox.length > 0;
    if (stop && !this.paused) {
      this.paused = true;
      this.socket.pause();
    } else if (!stop && this.paused) {
      this.paused = false;
      this.socket.resume();
    }
  }

  private isPeerId(id: number): boolean {
    return (id & 1) === this.peerParity;
  }

  private dispatch(frame: SpdyFrame, headers: SpdyHeaders): void {
    if (this.log.enabled(5)) this.log.verbose(5, 'spdy frame received', { frameType: frame.type, streamID: 'streamId' in frame ? frame.streamId : undefined });
    switch (frame.type) {
      case 'DATA': {
        const s = this.streams.get(frame.streamId);
        if (s === undefined) {
          // Data for a stream we already closed is expected in flight; only a never-opened id is an error.
          const neverOpened = this.isPeerId(frame.streamId) ? frame.streamId > this.lastPeerStreamId : frame.streamId >= this.nextStreamId;
          if (neverOpened) this.writeFrame(encodeRstStream(frame.streamId, RST_STATUS.invalidStream));
          return;
        }
        if (s.remoteFin) {
          s.reset(RST_STATUS.streamAlreadyClosed);
          return;
        }
        if (frame.data.length > 0) s.receiveData(frame.data);
        if (frame.fin) s.receiveFin();
        return;
      }
      case 'SYN_STREAM':
        this.acceptStream(frame.streamId, frame.fin, frame.unidirectional, headers);
        return;
      case 'SYN_REPLY': {
        const s = this.streams.get(frame.streamId);
        if (s === undefined || !s.local || s.replied) {
          this.writeFrame(encodeRstStream(frame.streamId, s === undefined ? RST_STATUS.invalidStream : RST_STATUS.streamInUse));
          return;
        }
        s.replied = true;
        s.headers = headers;
        s.emit('reply', headers);
        if (frame.fin) s.receiveFin();
        return;
      }
      case 'HEADERS': {
        const s = this.streams.get(frame.streamId);
        if (s === undefined) return;
        Object.assign(s.headers, headers);
        if (frame.fin) s.receiveFin();
        return;
      }
      case 'RST_STREAM':
        this.streams.get(frame.streamId)?.receiveReset(frame.status);
        return;
      case 'PING':
        this.onPing(frame.id);
        return;
      case 'GOAWAY':
        this.goAwayReceived = true;
        for (const s of [...this.streams.values()]) {
          if (s.local && s.id > frame.lastGoodStreamId) s.receiveReset(RST_STATUS.refusedStream);
        }
        this.emit('goaway', { lastGoodStreamId: frame.lastGoodStreamId, status: frame.status });
        return;
      case 'SETTINGS':
      case 'WINDOW_UPDATE':
      case 'UNKNOWN':
        return;
      default: {
        const never: never = frame;
        throw new Error(`unhandled SPDY frame ${JSON.stringify(never)}`);
      }
    }
  }

  private acceptStream(id: number, fin: boolean, unidirectional: boolean, headers: SpdyHeaders): void {
    if (id === 0 || !this.isPeerId(id) || id <= this.lastPeerStreamId) {
      this.fail(new SpdyProtocolError(`SYN_STREAM with stream id ${id} after ${this.lastPeerStreamId} (ids must be new, rising and of the peer's parity)`));
      return;
    }
    this.lastPeerStreamId = id;
    if (this.goAwaySent || this.streams.size >= this.maxStreams || this.listenerCount('stream') === 0) {
      this.writeFrame(encodeRstStream(id, RST_STATUS.refusedStream));
      return;
    }
    const stream = new SpdyStream(this.host, id, false, headers);
    if (unidirectional) stream.localFin = true;
    this.streams.set(id, stream);
    try {
      this.emit('stream', stream);
    } catch (err: unknown) {
      this.log.error('spdy stream handler failed', { streamID: id, error: errorMessage(err) });
      stream.reset(RST_STATUS.internalError);
      return;
    }
    if (fin) stream.receiveFin();
  }

  private onPing(id: number): void {
    const ours = (id & 1) === (this.nextPingId & 1);
    if (!ours) {
      this.writeFrame(encodePing(id));
      return;
    }
    const p = this.pings.get(id);
    if (p === undefined) return;
    this.pings.delete(id);
    clearTimeout(p.timer);
    p.resolve(performance.now() - p.started);
  }

  private fail(err: unknown): void {
    if (this.failed || this.isClosed) return;
    this.failed = true;
    const error = err instanceof Error ? err : new SpdyProtocolError(errorMessage(err));
    this.log.verbose(2, 'spdy session failed', { error: error.message });
    this.emit('protocolError', error);
    this.inbox.length = 0;
    this.paused = false;
    this.socket.resume(); // keep reading (and dropping) so the peer's close is seen
    this.close(error instanceof SpdyProtocolError ? GOAWAY_STATUS.protocolError : GOAWAY_STATUS.internalError);
  }

  private readonly onSocketEnd = (): void => {
    // The peer is done; nothing more can arrive for any stream.
    this.close();
  };

  private readonly onSocketError = (err: Error): void => {
    this.log.verbose(2, 'spdy session socket error', { error: err.message });
  };

  private readonly onSocketClose = (): void => {
    this.isClosed = true;
    if (this.closeTimer !== null) clearTimeout(this.closeTimer);
    this.closeTimer = null;
    this.socket.removeListener('data', this.onSocketData);
    this.socket.removeListener('drain', this.onDrain);
    this.socket.removeListener('end', this.onSocketEnd);
    this.decompressor.destroy();
    const closedErr = new SpdySessionClosedError('the SPDY session closed');
    for (const p of this.pings.values()) {
      clearTimeout(p.timer);
      p.reject(closedErr);
    }
    this.pings.clear();
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const cb of waiters) cb(closedErr);
    for (const s of [...this.streams.values()]) s.sessionGone();
    this.streams.clear();
    this.blocked.clear();
    this.emit('close');
  };
}
