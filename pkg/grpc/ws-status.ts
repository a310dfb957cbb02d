// The end of an agent link over a WebSocket says what gRPC trailers say over
// HTTP/2: the close frame carries 4000 + the gRPC status code (4000-4999 is
// the private-use range, RFC 6455 §7.4.2) and the status message as its
// reason, cut to the 123 bytes a close frame holds. A refused upgrade answers
// with an HTTP status and the same grpc-status/grpc-message headers a
// trailers-only gRPC answer has.

import { GrpcStatus, grpcStatusName } from './status.js';

const STATUS_CLOSE_BASE = 4000;
/** Bytes of reason a close frame can carry. */
const MAX_CLOSE_REASON = 123;

export const WS_NORMAL_CLOSE = 1000;

export function closeCodeOf(grpcStatus: number): number {
  return STATUS_CLOSE_BASE + grpcStatus;
}

/** The gRPC status a close code carries, if it carries one. */
export function statusOfClose(code: number): number | undefined {
  if (code === WS_NORMAL_CLOSE) return GrpcStatus.OK;
  return code >= STATUS_CLOSE_BASE && code <= STATUS_CLOSE_BASE + 16 ? code - STATUS_CLOSE_BASE : undefined;
}

/** `message` cut to fit a close frame, on a character boundary. */
export function closeReason(message: string): string {
  let text = message;
  while (Buffer.byteLength(text) > MAX_CLOSE_REASON) text = text.slice(0, -1);
  return text;
}

/** "UNAVAILABLE: why" for a close, or "code 1006" for one that carries no status. */
export function describeClose(code: number, reason: string): string {
  const status = statusOfClose(code);
  const name = status === undefined ? `WebSocket close code ${code}` : grpcStatusName(status);
  return reason === '' ? name : `${name}: ${reason}`;
}

/** The HTTP status a refused upgrade answers with, for the gRPC status the refusal carries. */
export function httpStatusOf(grpcStatus: number): number {
  switch (grpcStatus) {
    case GrpcStatus.INVALID_ARGUMENT:
      return 400;
    case GrpcStatus.UNAUTHENTICATED:
      return 401;
    case GrpcStatus.PERMISSION_DENIED:
      return 403;
    case GrpcStatus.UNIMPLEMENTED:
      return 404;
    case GrpcStatus.RESOURCE_EXHAUSTED:
      return 429;
    case GrpcStatus.UNAVAILABLE:
      return 503;
    default:
      return 500;
  }
}
