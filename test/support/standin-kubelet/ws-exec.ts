// exec/attach over a WebSocket with the k8s channel protocol
// (v5.channel.k8s.io or v4.channel.k8s.io): every binary message starts with
// a channel byte: 0 stdin, 1 stdout, 2 stderr, 3 error (status JSON),
// 4 resize; v5 adds 255 "close channel N". The command's behaviour comes from
// exec.ts; stdin is echoed to stdout with back-pressure.

import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import type { Logger } from '../../../pkg/log/logger.js';
import { WebSocketProtocolError, errorMessage } from './errors.js';
import { exitStatusJSON, type ExecPlan, type StreamOptions } from './exec.js';
import { CLOSE_CODE, FrameParser, OPCODE, closePayload, frameHeader, parseClosePayload } from './websocket-frames.js';

export const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, error: 3, resize: 4, close: 255 } as const;

export interface WebSocketExecOptions {
  socket: Duplex;
  head: Buffer;
  protocol: string;
  options: StreamOptions;
  plan: ExecPlan;
  /** How long the command takes to start: its output and exit come no sooner (a client may not be ready for them at once). */
  startDelayMs: number;
  /** How long to wait for the peer's close frame after ours; default 1000 ms. */
  closeTimeoutMs: number;
  logger: Logger;
}

/** Close codes an endpoint may put in a close frame (RFC 6455 7.4). */
function sendable(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/** Events: 'close'. */
export class WebSocketExecSession extends EventEmitter {
  private readonly socket: Duplex;
  private readonly parser: FrameParser;
  private readonly opts: WebSocketExecOptions;
  /** Channel of the data message being received; null before its first byte. */
  private channel: number | null = null;
  private stdinClosed = false;
  private finished = false;
  private closeSent = false;
  private closeReceived = false;
  private waitingForDrain = false;
  private closeTimer: NodeJS.Timeout | null = null;
  private startTimer: NodeJS.Timeout | null = null;

  constructor(opts: WebSocketExecOptions) {
    super();
    this.opts = opts;
    this.socket = opts.socket;
    this.parser = new FrameParser(true, {
      onData: (opcode, piece, first, last) => this.onData(opcode, piece, first, last),
      onControl: (opcode, payload) => this.onControl(opcode, payload),
    });
    this.socket.on('data', this.onSocketData);
    this.socket.on('end', () => this.socket.end());
    this.socket.on('error', (err: Error) => opts.logger.verbose(2, 'exec websocket socket error', { error: err.message }));
    this.socket.once('close', () => {
      if (this.closeTimer !== null) clearTimeout(this.closeTimer);
      this.closeTimer = null;
      if (this.startTimer !== null) clearTimeout(this.startTimer);
      this.startTimer = null;
      this.emit('close');
    });
  }

  /** Call after the 101 is written; the command starts after startDelayMs. */
  start(): void {
    const run = (): void => {
      this.startTimer = null;
      if (this.opts.plan.output.length > 0) this.sendChannel(CHANNEL.stdout, this.opts.plan.output);
      if (!this.opts.plan.echoStdin) this.finish(this.opts.plan.exitCode);
    };
    if (this.opts.startDelayMs > 0) {
      this.startTimer = setTimeout(run, this.opts.startDelayMs);
      this.startTimer.unref();
    } else {
      run();
    }
    if (this.opts.head.length > 0) this.onSocketData(this.opts.head);
  }

  destroy(): void {
    this.socket.destroy();
  }

  private readonly onSocketData = (chunk: Buffer): void => {
    if (this.closeReceived) return;
    try {
      this.parser.write(chunk);
    } catch (err: unknown) {
      const code = err instanceof WebSocketProtocolError ? err.closeCode : CLOSE_CODE.protocolError;
      this.opts.logger.verbose(2, 'exec websocket protocol error', { error: errorMessage(err) });
      this.closeReceived = true; // stop reading frames
      this.sendClose(code, errorMessage(err).slice(0, 120));
    }
  };

  private onData(opcode: number, piece: Buffer, first: boolean, last: boolean): void {
    if (this.closeReceived) return; // frames after a close frame are ignored
    if (opcode === OPCODE.text) throw new WebSocketProtocolError('text frames are not part of the channel protocol', CLOSE_CODE.unsupportedData);
    if (first) this.channel = null;
    let data = piece;
    if (this.channel === null && data.length > 0) {
      this.channel = data[0]!;
      data = data.subarray(1);
    }
    if (this.channel !== null && data.length > 0) this.onChannelData(this.channel, data);
    if (last) this.channel = null;
  }

  private onChannelData(channel: number, data: Buffer): void {
    if (channel === CHANNEL.stdin) {
      if (this.opts.plan.echoStdin && !this.stdinClosed && !this.finished) {
        const echo = this.opts.plan.transform(data);
        if (echo.length > 0) this.sendChannel(CHANNEL.stdout, echo);
      }
    } else if (channel === CHANNEL.close && this.opts.protocol === 'v5.channel.k8s.io') {
      // Each payload byte names a channel the client will not write to again.
      if (data.includes(CHANNEL.stdin) && !this.stdinClosed) {
        this.stdinClosed = true;
        this.finish(this.opts.plan.exitCode);
      }
    }
    // resize (4) and anything else: nothing to do for a made-up container.
  }

  private onControl(opcode: number, payload: Buffer): void {
    if (this.closeReceived) return;
    if (opcode === OPCODE.ping) {
      this.writeFrame(OPCODE.pong, payload);
    } else if (opcode === OPCODE.close) {
      this.closeReceived = true;
      if (payload.length === 1) throw new WebSocketProtocolError('close frame with a 1-byte payload', CLOSE_CODE.protocolError);
      const { code } = parseClosePayload(payload);
      this.sendClose(code === 1005 ? CLOSE_CODE.normal : sendable(code) ? code : CLOSE_CODE.protocolError);
      this.socket.end();
    }
  }

  private finish(exitCode: number): void {
    if (this.finished) return;
    this.finished = true;
    this.sendChannel(CHANNEL.error, Buffer.from(exitStatusJSON(exitCode, this.opts.options.command)));
    this.sendClose(CLOSE_CODE.normal);
  }

  private sendChannel(channel: number, data: Buffer): void {
    if (this.closeSent || !this.socket.writable) return;
    const head = Buffer.concat([frameHeader(OPCODE.binary, data.length + 1), Buffer.from([channel])]);
    this.socket.write(head);
    if (!this.socket.write(data) && !this.waitingForDrain) {
      // Stop reading stdin until the client has taken our output.
      this.waitingForDrain = true;
      this.socket.pause();
      this.socket.once('drain', () => {
        this.waitingForDrain = false;
        this.socket.resume();
      });
    }
  }

  private writeFrame(opcode: number, payload: Buffer): void {
    if (!this.socket.writable) return;
    this.socket.write(Buffer.concat([frameHeader(opcode, payload.length), payload]));
  }

  private sendClose(code: number, reason = ''): void {
    if (this.closeSent) return;
    this.closeSent = true;
    this.writeFrame(OPCODE.close, closePayload(code, reason));
    if (this.closeReceived) this.socket.end();
    // Wait for the client's close frame (or its end of the connection), but not forever.
    this.closeTimer = setTimeout(() => this.socket.destroy(), this.opts.closeTimeoutMs);
    this.closeTimer.unref();
  }
}
