// Error classes shared by server, agent and frontends. Each has a stable
// `code`; for dial failures the code doubles as the metric `reason` label and
// decides the HTTP status a frontend answers with.

export type ProtocolErrorCode =
  | 'YT_ERR_PROTOCOL_VARINT'
  | 'YT_ERR_PROTOCOL_LENGTH'
  | 'YT_ERR_PROTOCOL_TRUNCATED'
  | 'YT_ERR_PROTOCOL_WIRE_TYPE'
  | 'YT_ERR_PROTOCOL_TAG'
  | 'YT_ERR_PROTOCOL_FRAME'
  | 'YT_ERR_PROTOCOL_TOO_LARGE'
  | 'YT_ERR_PROTOCOL_COMPRESSED';

/** Bytes that are not a valid packet or gRPC message. */
export class ProtocolError extends Error {
  override readonly name = 'ProtocolError';
  constructor(
    readonly code: ProtocolErrorCode,
    message: string,
  ) {
    super(message);
  }
}

/** Why a dial did not produce a connection. */
export type DialFailureReason =
  /** No connected agent serves the requested host. */
  | 'YT_ERR_NO_AGENT'
  /** The agent tried and failed (refused, unreachable, reset, ...). */
  | 'YT_ERR_DIAL_FAILED'
  /** The agent's allow-list does not permit the address. */
  | 'YT_ERR_DIAL_DENIED'
  /** No DIAL_RSP in time, or the agent's own dial timed out. */
  | 'YT_ERR_DIAL_TIMEOUT'
  /** The agent's stream ended while the dial was pending. */
  | 'YT_ERR_AGENT_GONE'
  /** The caller gave up (closed or aborted) before the dial completed. */
  | 'YT_ERR_DIAL_CANCELLED'
  /** The tunnel server is shutting down. */
  | 'YT_ERR_TUNNEL_CLOSED'
  /** The request itself is unusable (bad address). */
  | 'YT_ERR_BAD_ADDRESS';

export class DialError extends Error {
  override readonly name = 'DialError';
  readonly code: DialFailureReason;
  constructor(code: DialFailureReason, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/** A tunnelled connection that ended abnormally (agent gone, CLOSE_RSP with an error). */
export class ConnectionClosedError extends Error {
  override readonly name = 'ConnectionClosedError';
  readonly code = 'YT_ERR_CONNECTION_CLOSED';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** The message of any thrown value, for logs. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
