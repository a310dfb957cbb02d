// The agent's side of its `AgentService/Connect` call: the shared packet
// framing plus what a gRPC client reads, the call's status in the trailers.

import { constants, type ClientHttp2Stream } from 'node:http2';
import { GrpcPacketStream, type GrpcPacketStreamHandlers } from '../mux/grpc-packet-stream.js';
import type { ProtocolError } from '../protocol/errors.js';

/** gRPC status names for messages. */
const STATUS_NAMES: Record<string, string> = {
  '0': 'OK',
  '1': 'CANCELLED',
  '2': 'UNKNOWN',
  '3': 'INVALID_ARGUMENT',
  '4': 'DEADLINE_EXCEEDED',
  '5': 'NOT_FOUND',
  '7': 'PERMISSION_DENIED',
  '8': 'RESOURCE_EXHAUSTED',
  '12': 'UNIMPLEMENTED',
  '13': 'INTERNAL',
  '14': 'UNAVAILABLE',
  '16': 'UNAUTHENTICATED',
};

/** "UNAVAILABLE: server shutting down" from grpc-status and grpc-message. */
export function describeGrpcStatus(status: string | undefined, message: string | undefined): string {
  const name = status === undefined ? 'no status' : (STATUS_NAMES[status] ?? `status ${status}`);
  const text = message === undefined || message === '' ? '' : `: ${safeDecode(message)}`;
  return name + text;
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text; // not percent-encoded after all
  }
}

export class ServerStream extends GrpcPacketStream {
  constructor(private readonly clientStream: ClientHttp2Stream) {
    super(clientStream);
  }

  override start(handlers: GrpcPacketStreamHandlers): void {
    super.start(handlers);
    const stream = this.clientStream;
    stream.on('trailers', (trailers) => {
      const status = trailers['grpc-status'] as string | undefined;
      this.finish(`server ended the stream (${describeGrpcStatus(status, trailers['grpc-message'] as string | undefined)})`);
    });
    stream.on('end', () => this.finish('server ended the stream'));
    stream.on('close', () => {
      const code = stream.rstCode;
      this.finish(code !== undefined && code !== 0 ? `stream reset by the server (HTTP/2 error code ${code})` : 'connection closed');
    });
    stream.on('error', () => {
      // 'close' follows and reports.
    });
  }

  protected onProtocolError(err: ProtocolError): void {
    this.cancel(`server sent a malformed message: ${err.message}`);
  }

  /** Ends the call from our side (RST_STREAM CANCEL), for `reason`. */
  cancel(reason: string): void {
    this.finish(reason);
    if (!this.clientStream.closed && !this.clientStream.destroyed) this.clientStream.close(constants.NGHTTP2_CANCEL);
  }
}
