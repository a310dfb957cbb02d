// The client's side of a streaming gRPC call carrying packets (the agent's
// `AgentService/Connect`): the shared packet framing plus what a gRPC client
// reads, the call's status in the trailers, and cancellation.

import { constants, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { GrpcPacketStream, type GrpcPacketStreamHandlers, type GrpcPacketStreamOptions } from './packet-stream.js';
import { describeGrpcStatus } from './status.js';
import type { ProtocolError } from '../protocol/errors.js';

export class ClientPacketCall extends GrpcPacketStream {
  constructor(
    private readonly clientStream: ClientHttp2Stream,
    opts: GrpcPacketStreamOptions = {},
  ) {
    super(clientStream, opts);
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    const stream = this.clientStream;
    stream.on('trailers', (trailers: IncomingHttpHeaders) => {
      const status = trailers['grpc-status'] as string | undefined;
      this.finish(`server ended the stream (${describeGrpcStatus(status, trailers['grpc-message'] as string | undefined)})`);
    });
    stream.on('end', () => this.finish('server ended the stream'));
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

  /** Ends the call from our side (RST_STREAM CANCEL), for `reason`. */
  cancel(reason: string): void {
    this.finish(reason);
    if (!this.clientStream.closed && !this.clientStream.destroyed) this.clientStream.close(constants.NGHTTP2_CANCEL);
  }
}
