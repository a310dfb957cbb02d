// The errors of pkg/interceptor, on the shared bases in pkg/protocol/errors.ts.

import { TunnelError } from '../protocol/errors.js';

/** A request the caller of a master port should get an HTTP error for, with a one-line reason. */
export class HttpError extends TunnelError {
  override readonly name = 'HttpError';
  readonly code = 'YT_ERR_HTTP_REQUEST';
  constructor(
    readonly status: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The CONNECT proxier answered something other than 200 (or nothing). */
export class ProxierError extends TunnelError {
  override readonly name = 'ProxierError';
  readonly code = 'YT_ERR_PROXIER_STATUS';
  constructor(
    /** The proxier's HTTP status, or 0 if it gave none. */
    readonly status: number,
    /** The proxier's one-line reason. */
    readonly reason: string,
    address: string,
    options?: { cause?: unknown },
  ) {
    super(
      status === 0 ? `proxier closed the connection to ${address} without an answer: ${reason}` : `proxier answered ${status} for ${address}: ${reason}`,
      options,
    );
  }
}

/** The TLS session to the kubelet could not be set up. */
export class KubeletTLSError extends TunnelError {
  override readonly name = 'KubeletTLSError';
  readonly code = 'YT_ERR_KUBELET_TLS';
}
