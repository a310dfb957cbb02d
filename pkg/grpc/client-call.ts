// The client's side of a streaming gRPC call carrying packets (the agent's
// `AgentService/Connect`): the shared packet framing plus what a gRPC client
// reads, the call's status in the trailers, and cancellation.

import { constants, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import type { Socket } from 'node:net';
import { GrpcPacketStream, type GrpcPacketStreamHandlers, type GrpcPacketStreamOptions } from './packet-stream.js';
import { describeGrpcStatus } from './status.js';
import type { ProtocolError } from '../protocol/errors.js';

export class ClientPacketCall extends GrpcPacketStream {
  /** The server ended the call itself (trailers or END_STREAM): a goodbye, not a failure. */
  endedByServer = false;

  /**
   * `transport`: the socket beneath, when this call is its connection's only
   * stream (the agent's Connect call); cancel() then drops it.
   */
  constructor(
    private readonly clientStream: ClientHttp2Stream,
    opts: GrpcPacketStreamOptions = {},
    private readonly transport?: Socket,
  ) {
    super(clientStream, opts);
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    const stream = this.clientStream;
    stream.on('trailers', (trailers: IncomingHttpHeaders) => {
      this.endedByServer = true;
      const status = trailers['grpc-status'] as string | undefined;
      this.finish(`server ended the stream (${describeGrpcStatus(status, trailers['grpc-message'] as string | undefined)})`);
    });
    stream.on('end', () => {
      // A stream whose connection is being destroyed ends too: no goodbye ('close' follows).
      if (stream.destroyed || stream.session === undefined || stream.session.destroyed) return;
      this.endedByServer = true;
      this.finish('server ended the stream');
    });
    stream.on('close', () => {
      const code = stream.rstCode;
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when the stream closed without a reset, whatever @types/node says
      this.finish(code !== undefined && code !== 0 ? `stream reset by the server (HTTP/2 error code ${code})` : 'connection closed');
    });
    stream.on('error', () => {
      // 'close' follows and reports.
    });
  }

  protected onProtocolError(err: ProtocolError): void {
    this.cancel(`server sent a malformed message: ${err.message}`);
  }

  protected onOverloaded(message: string): void {
    this.cancel(message);
  }

  protected onInternalError(message: string): void {
    this.cancel(message);
  }

  /**
   * Says goodbye: half-closes the call (END_STREAM), which the server takes
   * for a deliberate end (it answers with its status), unlike a reset.
   */
  goodbye(reason: string): void {
    this.finish(reason);
    if (!this.clientStream.closed && !this.clientStream.destroyed) {
      this.clientStream.resume();
      this.clientStream.end();
    }
  }

  /**
   * Ends the call from our side as a failure, for `reason`. Node resets a
   * stream only after half-closing it (stream.close(code) sends END_STREAM,
   * then RST_STREAM), and a server takes END_STREAM for a goodbye: with
   * session resume it would end the session this agent means to resume. So a
   * call given its transport drops its connection instead: the HTTP/2
   * session, which then sends no END_STREAM, and the socket. The server sees
   * the link fail. In that order: destroying the socket under a session with
   * a write in flight loses that write's callback in Node 20, and with it the
   * pooled slabs the write holds. Without a transport: RST_STREAM CANCEL
   * (after Node's END_STREAM).
   */
  cancel(reason: string): void {
    this.finish(reason);
    const transport = this.transport;
    if (transport === undefined) {
      if (!this.clientStream.closed && !this.clientStream.destroyed) this.clientStream.close(constants.NGHTTP2_CANCEL);
      return;
    }
    this.clientStream.session?.destroy();
    transport.destroy();
  }
}
