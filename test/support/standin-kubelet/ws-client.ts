// The client side of the k8s channel WebSocket protocol, as kubectl v1.32
// speaks it for exec/attach: masked binary messages whose first byte is the
// channel; v5 closes stdin with [255, 0].

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { UpgradeRefusedError, WebSocketProtocolError, errorMessage } from './errors.js';
import { headerValue, readResponseHead, requestHead, type ResponseHead } from './raw-http.js';
import { CLOSE_CODE, FrameParser, OPCODE, closePayload, maskedFrame, parseClosePayload, webSocketAccept } from './websocket-frames.js';

export interface ChannelWebSocketRequest {
  socket: Duplex;
  /** e.g. /exec/default/p1/c1?command=cat&input=1&output=1&error=1 */
  target: string;
  /** Offered in one Sec-Websocket-Protocol header; kubectl v1.32 offers only v5.channel.k8s.io. */
  protocols: readonly string[];
  /** Host header; default "kubelet". */
  host?: string;
  headers?: Array<[string, string]>;
  timeoutMs?: number;
}

/** Sends the handshake; resolves on a valid 101, rejects with UpgradeRefusedError otherwise. */
export async function upgradeToChannelWebSocket(req: ChannelWebSocketRequest): Promise<{ client: ChannelWebSocketClient; head: ResponseHead }> {
  const key = randomBytes(16).toString('base64');
  // Header names and order as kubectl's Go client writes them.
  req.socket.write(
    requestHead('GET', req.target, [
      ['Host', req.host ?? 'kubelet'],
      ...(req.headers ?? []),
      ['Connection', 'Upgrade'],
      ['Sec-Websocket-Key', key],
      ['Sec-Websocket-Protocol', req.protocols.join(', ')],
      ['Sec-Websocket-Version', '13'],
      ['Upgrade', 'websocket'],
    ]),
  );
  const { head, rest } = await readResponseHead(req.socket, req.timeoutMs ?? 5000);
  if (head.status !== 101) throw new UpgradeRefusedError(req.target, head.status, head.reason);
  if (headerValue(head, 'sec-websocket-accept') !== webSocketAccept(key))
    throw new WebSocketProtocolError('Sec-WebSocket-Accept does not match the key', CLOSE_CODE.protocolError);
  const protocol = headerValue(head, 'sec-websocket-protocol') ?? '';
  if (!req.protocols.includes(protocol))
    throw new WebSocketProtocolError(`server chose subprotocol ${JSON.stringify(protocol)}, which was not offered`, CLOSE_CODE.protocolError);
  const client = new ChannelWebSocketClient(req.socket, protocol);
  client.receive(rest);
  req.socket.resume();
  return { client, head };
}

/**
 * Events: 'data' (channel, piece: Buffer) for each piece of a message after
 * its channel byte; 'closeFrame' ({ code, reason }) when the server's close
 * frame arrives; 'pong' (payload); 'protocolError' (Error); 'close' when the
 * connection is gone.
 */
export class ChannelWebSocketClient extends EventEmitter {
  readonly protocol: string;
  /** The server's close frame, once received. */
  closeFrame: { code: number; reason: string } | null = null;
  private readonly parser: FrameParser;
  private channel: number | null = null;
  private closeSent = false;

  constructor(
    private readonly socket: Duplex,
    protocol: string,
  ) {
    super();
    this.protocol = protocol;
    this.parser = new FrameParser(false, {
      onData: (_opcode, piece, first, last) => {
        if (first) this.channel = null;
        let data = piece;
        if (this.channel === null && data.length > 0) {
          this.channel = data[0]!;
          data = data.subarray(1);
        }
        if (this.channel !== null && data.length > 0) this.emit('data', this.channel, data);
        if (last) this.channel = null;
      },
      onControl: (opcode, payload) => {
        if (opcode === OPCODE.ping) this.socket.write(maskedFrame(OPCODE.pong, payload));
        else if (opcode === OPCODE.pong) this.emit('pong', payload);
        else if (opcode === OPCODE.close) {
          this.closeFrame = parseClosePayload(payload);
          if (!this.closeSent) this.close(this.closeFrame.code === 1005 ? CLOSE_CODE.normal : this.closeFrame.code);
          this.socket.end();
          this.emit('closeFrame', this.closeFrame);
        }
      },
    });
    socket.on('data', (chunk: Buffer) => this.receive(chunk));
    socket.on('error', (err: Error) => this.emit('protocolError', err));
    socket.once('close', () => this.emit('close'));
  }

  receive(chunk: Buffer): void {
    try {
      this.parser.write(chunk);
    } catch (err: unknown) {
      this.emit('protocolError', err instanceof Error ? err : new Error(errorMessage(err)));
      this.socket.destroy();
    }
  }

  /**
   * Sends `data` on `channel` as one message, split into `fragments` frames
   * (the first carries the channel byte). Returns write()'s back-pressure hint.
   */
  write(channel: number, data: Buffer, fragments = 1): boolean {
    const payload = Buffer.concat([Buffer.from([channel]), data]);
    const step = Math.max(1, Math.ceil(payload.length / Math.max(1, fragments)));
    let ok = true;
    for (let pos = 0, first = true; pos < payload.length; pos += step, first = false) {
      const part = payload.subarray(pos, pos + step);
      ok = this.socket.write(maskedFrame(first ? OPCODE.binary : OPCODE.continuation, part, pos + step >= payload.length));
    }
    return ok;
  }

  /** Resolves once the socket's write buffer has drained (at once if it has). */
  drained(): Promise<void> {
    if (!this.socket.writableNeedDrain) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        this.socket.removeListener('drain', done);
        this.socket.removeListener('close', done);
        resolve();
      };
      this.socket.once('drain', done);
      this.socket.once('close', done);
    });
  }

  /** v5.channel.k8s.io: tells the server that nothing more comes on `channel` (0 = stdin). */
  closeChannel(channel: number): void {
    this.socket.write(maskedFrame(OPCODE.binary, Buffer.from([255, channel])));
  }

  ping(payload = Buffer.alloc(0)): void {
    this.socket.write(maskedFrame(OPCODE.ping, payload));
  }

  close(code: number = CLOSE_CODE.normal, reason = ''): void {
    if (this.closeSent || !this.socket.writable) return;
    this.closeSent = true;
    this.socket.write(maskedFrame(OPCODE.close, closePayload(code, reason)));
  }

  destroy(): void {
    this.socket.destroy();
  }
}
