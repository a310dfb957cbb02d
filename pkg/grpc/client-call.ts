// The client's side of a streaming gRPC call carrying packets (the agent's
// `AgentService/Connect`): the client end both transports share
// (client-packet-stream.ts) plus what a gRPC client reads, the call's status
// in the trailers, and how a goodbye and a cancel show in HTTP/2.

import { constants, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import type { Socket } from 'node:net';
import { ClientPacketStream } from './client-packet-stream.js';
import type { GrpcPacketStreamHandlers, GrpcPacketStreamOptions } from './packet-stream.js';
import { describeGrpcStatus } from './status.js';

export class ClientPacketCall extends ClientPacketStream {
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
      const status = trailers['grpc-status'] as string | undefined;
      this.serverEnded(`server ended the stream (${describeGrpcStatus(status, trailers['grpc-message'] as string | undefined)})`);
    });
    stream.on('end', () => {
      // A stream whose connection is being destroyed ends too: no goodbye ('close' follows).
      if (stream.destroyed || stream.session === undefined || stream.session.destroyed) return;
      this.serverEnded('server ended the stream');
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

  /**
   * A goodbye: half-closes the call (END_STREAM), which the server takes for
   * a deliberate end (it answers with its status), unlike a reset.
   */
  protected sendGoodbye(): void {
    if (!this.clientStream.closed && !this.clientStream.destroyed) {
      this.clientStream.resume();
      this.clientStream.end();
    }
  }

  /**
   * A failure. Node resets a stream only after half-closing it
   * (stream.close(code) sends END_STREAM, then RST_STREAM), and a server
   * takes END_STREAM for a goodbye: with session resume it would end the
   * session this agent means to resume. So a call given its transport drops
   * its connection instead: the HTTP/2 session, which then sends no
   * END_STREAM, and the socket. The server sees the link fail. In that order:
   * destroying the socket under a session with a write in flight loses that
   * write's callback in Node 20, and with it the pooled slabs the write
   * holds. Without a transport: RST_STREAM CANCEL (after Node's END_STREAM).
   */
  protected breakLink(): void {
    const transport = this.transport;
    if (transport === undefined) {
      if (!this.clientStream.closed && !this.clientStream.destroyed) this.clientStream.close(constants.NGHTTP2_CANCEL);
      return;
    }
    this.clientStream.session?.destroy();
    transport.destroy();
  }
}
