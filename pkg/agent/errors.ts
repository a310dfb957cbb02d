// The errors of pkg/agent, on the shared bases in pkg/protocol/errors.ts.

import { CodedError } from '../protocol/errors.js';

/**
 * Why the agent could not open a connection it was asked for. `code` is the
 * socket's errno (ECONNREFUSED, ENOTFOUND, ...) or one of ours; the message
 * uses Go's wording, which servers classify (dial-errors.ts).
 */
export class AgentDialError extends CodedError<string> {
  override readonly name = 'AgentDialError';
}

export type ServerConnectionErrorCode =
  /** The agent could not connect to the server or open its call (TLS, refusal, the connection closed). */
  | 'YT_ERR_CONNECT_FAILED'
  /** The server answered without usable serverid/servercount headers. */
  | 'YT_ERR_BAD_HEADERS'
  /** The server did not answer the call in time. */
  | 'YT_ERR_HANDSHAKE_TIMEOUT';

/** The agent's link to a tunnel server could not be set up. */
export class ServerConnectionError extends CodedError<ServerConnectionErrorCode> {
  override readonly name = 'ServerConnectionError';
}

export type ProxyErrorCode =
  /** The proxy answered no: an HTTP status other than 2xx to CONNECT, a SOCKS5 failure or refused credentials. */
  | 'YT_ERR_PROXY_REFUSED'
  /** The proxy could not be reached or spoke no protocol we understand. */
  | 'YT_ERR_PROXY_FAILED';

/** The agent could not open a connection through its proxy; the message names the proxy (never its credentials) and its answer. */
export class ProxyError extends CodedError<ProxyErrorCode> {
  override readonly name = 'ProxyError';
}
