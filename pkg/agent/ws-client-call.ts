// The agent's side of its link over a WebSocket: the same client end as its
// gRPC call (pkg/grpc/client-packet-stream.ts), over ws-message-duplex.ts. The server's
// status arrives in the close frame (pkg/grpc/ws-status.ts): a close that
// carries one is the server ending the link (as gRPC trailers are), anything
// else (no close frame, a broken socket) is the link failing, which session
// resume bridges.

import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import { ClientPacketStream } from '../grpc/client-packet-stream.js';
import type { GrpcPacketStreamHandlers, GrpcPacketStreamOptions } from '../grpc/packet-stream.js';
import { WsMessageDuplex } from '../grpc/ws-message-duplex.js';
import { describeClose, statusOfClose, WS_NORMAL_CLOSE } from '../grpc/ws-status.js';

export class WsClientCall extends ClientPacketStream {
  private readonly duplex: WsMessageDuplex;

  constructor(
    private readonly ws: WebSocket,
    opts: Omit<GrpcPacketStreamOptions, 'wholeMessages'>,
    private readonly transport: Socket,
  ) {
    const duplex = new WsMessageDuplex();
    super(duplex, { ...opts, wholeMessages: true });
    this.duplex = duplex;
    duplex.attach(ws);
    // A frame ws could not write (the socket was reset under it): without a
    // listener this error would end the process. The link failed; the
    // WebSocket's 'close' (1006) follows and reports it, and resume bridges it.
    duplex.on('error', () => ws.terminate());
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    const ws = this.ws;
    ws.on('message', (_data: Buffer, isBinary: boolean) => {
      if (!isBinary) this.cancel('server sent a text message on the agent link');
    });
    ws.on('error', () => {
      // 'close' follows and reports.
    });
    ws.once('close', (code: number, reason: Buffer) => {
      this.duplex.destroy();
      if (statusOfClose(code) !== undefined) {
        this.serverEnded(`server ended the stream (${describeClose(code, reason.toString())})`);
      } else {
        this.finish(`connection closed (${describeClose(code, reason.toString())})`);
      }
    });
    if (ws.readyState !== ws.OPEN) this.finish('connection closed');
  }

  /** A goodbye: a normal close (1000), which the server takes for a deliberate end. */
  protected sendGoodbye(): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(WS_NORMAL_CLOSE, 'goodbye');
  }

  /** Says goodbye and lets the socket go once the server answers the close frame, or after `graceMs`. */
  goodbyeAndClose(reason: string, graceMs: number): void {
    const { ws, transport } = this;
    this.goodbye(reason);
    if (ws.readyState === ws.CLOSED) {
      transport.destroy();
      return;
    }
    const timer = setTimeout(() => {
      ws.terminate();
      transport.destroy();
    }, graceMs);
    timer.unref();
    ws.once('close', () => {
      clearTimeout(timer);
      transport.destroy();
    });
  }

  /** A failure: the socket goes without a close frame, so the server keeps the session for a resume. */
  protected breakLink(): void {
    this.ws.terminate();
    this.transport.destroy();
  }
}
