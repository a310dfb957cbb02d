// The error boundary of everything we serve over gRPC: an error thrown by a
// call or packet handler is answered on that call (status INTERNAL, or a
// reset once the status can no longer be sent) and logged with its stack. It
// never reaches the event loop, where it would end the process and every
// node's tunnel with it.

import { constants, type ServerHttp2Stream } from 'node:http2';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { GrpcStatus, statusTrailers } from './status.js';

/** The fields that log an unexpected error: its message and its stack. */
export function errorFields(err: unknown): { error: string; stack: string | undefined } {
  return { error: errorMessage(err), stack: err instanceof Error ? err.stack : undefined };
}

/** Ends a server call after an internal error: a trailers-only INTERNAL if nothing was sent yet, else RST_STREAM INTERNAL_ERROR. */
export function failServerStream(stream: ServerHttp2Stream): void {
  if (stream.destroyed || stream.closed) return;
  if (!stream.headersSent) {
    stream.respond(
      { ':status': 200, 'content-type': 'application/grpc', ...statusTrailers(GrpcStatus.INTERNAL, 'internal error in yurt-tunnel-server; see its log') },
      { endStream: true },
    );
  } else {
    stream.close(constants.NGHTTP2_INTERNAL_ERROR);
  }
}

/** Wraps a server's 'stream' handler so that what it throws fails only that call. */
export function guardStreamHandler<A extends unknown[]>(
  log: Logger,
  handler: (stream: ServerHttp2Stream, ...rest: A) => void,
): (stream: ServerHttp2Stream, ...rest: A) => void {
  return (stream, ...rest) => {
    try {
      handler(stream, ...rest);
    } catch (err: unknown) {
      log.error('internal error handling a gRPC call; it ends with INTERNAL', errorFields(err));
      try {
        failServerStream(stream);
      } catch (inner: unknown) {
        log.error('could not end the failed call; destroying it', errorFields(inner));
        stream.destroy();
      }
    }
  };
}
