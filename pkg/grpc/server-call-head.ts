// The first steps of any gRPC call a server accepts over node:http2: check
// that it is a gRPC call for a method we serve, read its metadata, answer it
// with a status alone (trailers-only) or with response headers that open the
// stream. Used by the agent endpoint and by any other gRPC service we serve.

import type { IncomingHttpHeaders, OutgoingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import { metadataValues } from './metadata.js';
import { GrpcStatus, statusTrailers } from './status.js';

/** A refusal: the call ends with this status before any message. */
export interface CallRefusal {
  code: number;
  message: string;
}

/** A gRPC call as it arrives: its method and its metadata. */
export class IncomingCall {
  constructor(
    readonly stream: ServerHttp2Stream,
    readonly headers: IncomingHttpHeaders,
    private readonly rawHeaders: readonly string[],
  ) {}

  get path(): string {
    return String(this.headers[':path'] ?? '');
  }

  /** Every value of metadata `name`, in order. */
  metadata(name: string): string[] {
    return metadataValues(this.rawHeaders, name);
  }

  /**
   * Checks that this is a gRPC call (POST, application/grpc, no compression)
   * for one of `paths`; returns the refusal to send if not.
   */
  check(paths: readonly string[]): CallRefusal | undefined {
    const path = this.path;
    if (!paths.includes(path)) {
      return { code: GrpcStatus.UNIMPLEMENTED, message: `unknown method ${path}; this port serves ${paths.join(', ')}` };
    }
    const contentType = String(this.headers['content-type'] ?? '');
    if (this.headers[':method'] !== 'POST' || !contentType.startsWith('application/grpc')) {
      return { code: GrpcStatus.INVALID_ARGUMENT, message: 'expected a gRPC call (POST, content-type application/grpc)' };
    }
    const encoding = this.headers['grpc-encoding'];
    if (encoding !== undefined && encoding !== 'identity') {
      return { code: GrpcStatus.UNIMPLEMENTED, message: `grpc-encoding ${String(encoding)} is not supported` };
    }
    return undefined;
  }

  /** Ends the call at once with a status and no messages. Returns false if it was already answered. */
  refuse(refusal: CallRefusal): boolean {
    const { stream } = this;
    if (stream.headersSent || stream.destroyed || stream.closed) return false;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc', ...statusTrailers(refusal.code, refusal.message) }, { endStream: true });
    return true;
  }

  /** Sends the response headers (with `metadata`); the status follows in the trailers. */
  accept(metadata: Readonly<Record<string, string>>): void {
    const headers: OutgoingHttpHeaders = { ':status': 200, 'content-type': 'application/grpc', ...metadata };
    this.stream.respond(headers, { waitForTrailers: true });
  }
}
