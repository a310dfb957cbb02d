// The first steps of a gRPC call we make over node:http2: the request
// headers, and reading the server's response head (refused with a status, or
// accepted with metadata).

import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { describeGrpcStatus } from './status.js';

/** Opens a streaming call to `path` with `metadata` (throws if the session cannot open streams). */
export function startCall(
  session: ClientHttp2Session,
  path: string,
  metadata: Readonly<Record<string, string | string[]>>,
  userAgent: string,
): ClientHttp2Stream {
  const headers: OutgoingHttpHeaders = {
    ':method': 'POST',
    ':path': path,
    'content-type': 'application/grpc',
    te: 'trailers',
    'user-agent': userAgent,
    ...metadata,
  };
  return session.request(headers);
}

/**
 * Why the server refused the call, if its response head says so: an HTTP
 * status other than 200, or a trailers-only answer carrying grpc-status.
 */
export function responseRefusal(headers: IncomingHttpHeaders): string | undefined {
  const status = headers['grpc-status'] as string | undefined;
  if (Number(headers[':status']) === 200 && status === undefined) return undefined;
  return `HTTP ${String(headers[':status'])}, ${describeGrpcStatus(status, headers['grpc-message'] as string | undefined)}`;
}
