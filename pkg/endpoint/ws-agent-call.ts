// An agent's link over a WebSocket as the tunnel's AgentLink: the same packet
// stream as a gRPC call (pkg/grpc/packet-stream.ts, over ws-message-duplex.ts),
// the same ends. Where a gRPC call's status goes out in its trailers, here it
// goes in the close frame (pkg/grpc/ws-status.ts); the agent's goodbye is a
// normal close (1000) where over gRPC it is END_STREAM.

import type WebSocket from 'ws';
import { GrpcPacketStream, type GrpcPacketStreamHandlers, type GrpcPacketStreamOptions } from '../grpc/packet-stream.js';
import { GrpcStatus } from '../grpc/status.js';
import { WsMessageDuplex } from '../grpc/ws-message-duplex.js';
import { closeCodeOf, closeReason, describeClose, WS_NORMAL_CLOSE } from '../grpc/ws-status.js';
import type { ProtocolError } from '../protocol/errors.js';
import type { AgentLink, AgentLinkClose, AgentLinkEnd } from '../tunnel/agent-link.js';
import { GivenEnd } from './given-end.js';

/** How long a peer gets to answer our close frame before its socket is destroyed. */
const CLOSE_GRACE_MS = 5000;

export class WsAgentCall extends GrpcPacketStream implements AgentLink {
  private readonly duplex: WsMessageDuplex;
  private ws: WebSocket | undefined;
  private readonly ends = new GivenEnd();
  /** The agent closed normally (1000): its goodbye. */
  private agentLeft = false;
  private closedAt = false;
  private readonly closeWaiters: Array<() => void> = [];

  constructor(opts: Omit<GrpcPacketStreamOptions, 'wholeMessages'>) {
    const duplex = new WsMessageDuplex();
    super(duplex, { ...opts, wholeMessages: true });
    this.duplex = duplex;
    // A frame ws could not write (the socket was reset under it): without a
    // listener this error would end the process. The link failed; the
    // WebSocket's 'close' (1006) follows and reports it.
    duplex.on('error', () => this.ws?.terminate());
  }

  /** The upgrade completed: the link runs over `ws`. */
  attach(ws: WebSocket): void {
    this.ws = ws;
    this.duplex.attach(ws);
    ws.on('message', (_data: Buffer, isBinary: boolean) => {
      if (!isBinary) this.cutOff(GrpcStatus.INVALID_ARGUMENT, 'text message on the agent link: every message is one binary Packet');
    });
    ws.on('error', () => {
      // 'close' follows and reports.
    });
    ws.once('close', (code: number, reason: Buffer) => {
      this.closedAt = true;
      if (code === WS_NORMAL_CLOSE && !this.ends.isGiven) this.agentLeft = true;
      this.duplex.destroy();
      this.finish(code === WS_NORMAL_CLOSE ? 'agent ended the stream' : `connection closed (${describeClose(code, reason.toString())})`);
      for (const w of this.closeWaiters.splice(0)) w();
    });
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    if (this.ws === undefined || this.ws.readyState !== this.ws.OPEN) this.abort('the WebSocket upgrade did not complete');
  }

  close(end: AgentLinkClose): void {
    this.ends.close(this, end);
  }

  endFor(end: AgentLinkEnd, code: number): void {
    this.ends.endFor(this, end, code);
  }

  /** How the link ended (`left`: the agent closed normally). */
  endOf(reason: string): AgentLinkEnd {
    return this.ends.endOf(reason, this.agentLeft);
  }

  /** Runs `cb` once the WebSocket is closed (at once if it is). */
  onceClosed(cb: () => void): void {
    if (this.closedAt || this.ws === undefined) cb();
    else this.closeWaiters.push(cb);
  }

  /** Drops the link without a status (the connection is dead), for `reason`. */
  abort(reason: string): void {
    this.finish(reason);
    this.ws?.terminate();
    this.duplex.destroy();
  }

  /** Ends the link with a status in the close frame. */
  end(code: number, message: string): void {
    if (this.isEnded) return;
    this.finish(message === '' ? `ended with gRPC status ${code}` : message);
    const ws = this.ws;
    if (ws === undefined) return;
    ws.close(code === GrpcStatus.OK ? WS_NORMAL_CLOSE : closeCodeOf(code), closeReason(message));
    // A peer that never answers the close frame must not hold the socket.
    const timer = setTimeout(() => ws.terminate(), CLOSE_GRACE_MS);
    timer.unref();
    ws.once('close', () => clearTimeout(timer));
  }

  cutOff(code: number, message: string): void {
    this.stopReading();
    this.end(code, message);
  }

  protected onProtocolError(err: ProtocolError): void {
    this.cutOff(err.code === 'YT_ERR_PROTOCOL_TOO_LARGE' ? GrpcStatus.RESOURCE_EXHAUSTED : GrpcStatus.INTERNAL, err.message);
  }

  /** A peer that does not read cannot take a close frame either. */
  protected onOverloaded(message: string): void {
    this.abort(message);
  }

  protected onInternalError(message: string): void {
    this.cutOff(GrpcStatus.INTERNAL, message);
  }
}
