// The timeouts of every node:http server we run (the master ports, the meta
// ports): a bounded time for each request head, checked often enough to mean
// what it says.

/** Default time a caller has to send its request head (--request-head-timeout). */
export const DEFAULT_REQUEST_HEAD_TIMEOUT_MS = 30_000;

export interface HttpTimeouts {
  keepAliveTimeout: number;
  headersTimeout: number;
  requestTimeout: number;
  connectionsCheckingInterval: number;
}

/**
 * Options for http.createServer / https.createServer. Node checks the head
 * deadline of every connection each connectionsCheckingInterval (30 s by
 * default, which let a slow head live up to 90 s): check a tenth as often as
 * the deadline, between 10 ms and 1 s.
 */
export function httpTimeouts(headTimeoutMs: number, keepAliveTimeoutMs: number): HttpTimeouts {
  return {
    keepAliveTimeout: keepAliveTimeoutMs,
    headersTimeout: headTimeoutMs,
    // Node's default for the whole request; it may not be shorter than the head's.
    requestTimeout: Math.max(300_000, headTimeoutMs),
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(headTimeoutMs / 10))),
  };
}
