// Error classes shared by server, agent and frontends, in one place (as
// undici keeps its own). Each has a stable `code` and may keep the error that
// caused it as `cause`; for dial failures the code doubles as the metric
// `reason` label and decides the HTTP status a frontend answers with.

/** The base of our errors: a stable `code`, a message for people, the original as `cause`. */
export abstract class TunnelError extends Error {
  abstract readonly code: string;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** An error whose code is one of a family's (the type parameter), given at construction. */
export abstract class CodedError<Code extends string> extends TunnelError {
  constructor(
    readonly code: Code,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export type ProtocolErrorCode =
  | 'YT_ERR_PROTOCOL_VARINT'
  | 'YT_ERR_PROTOCOL_LENGTH'
  | 'YT_ERR_PROTOCOL_TRUNCATED'
  | 'YT_ERR_PROTOCOL_WIRE_TYPE'
  | 'YT_ERR_PROTOCOL_TAG'
  | 'YT_ERR_PROTOCOL_FRAME'
  | 'YT_ERR_PROTOCOL_TOO_LARGE'
  | 'YT_ERR_PROTOCOL_COMPRESSED'
  /** A packet that is mostly fields the decoder skips (codec.ts, MAX_SKIPPED_BYTES). */
  | 'YT_ERR_PROTOCOL_PADDING';

/** Bytes that are not a valid packet or gRPC message. */
export class ProtocolError extends CodedError<ProtocolErrorCode> {
  override readonly name = 'ProtocolError';
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
  /** The agent's link dropped and did not come back within the resume window while the dial was pending. */
  | 'YT_ERR_AGENT_LOST'
  /** The caller gave up (closed or aborted) before the dial completed. */
  | 'YT_ERR_DIAL_CANCELLED'
  /** The tunnel server is shutting down. */
  | 'YT_ERR_TUNNEL_CLOSED'
  /** The agent already has as many dials waiting for its answer as the server allows (--max-pending-dials-per-agent). */
  | 'YT_ERR_TOO_MANY_DIALS'
  /** The request itself is unusable (bad address). */
  | 'YT_ERR_BAD_ADDRESS'
  /** The address is one of this server's own listeners: the connection would come back into the tunnel. */
  | 'YT_ERR_DIAL_LOOP';

export class DialError extends CodedError<DialFailureReason> {
  override readonly name = 'DialError';
}

/**
 * A connection whose reader stopped while the link could not hold its data
 * for it (no per-connection flow control): it was closed so that the agent's
 * other connections and new dials keep flowing.
 */
export class ConnectionStalledError extends TunnelError {
  override readonly name = 'ConnectionStalledError';
  readonly code = 'YT_ERR_CONN_STALLED';
}

/** A tunnelled connection that ended abnormally (agent gone, CLOSE_RSP with an error). */
export class ConnectionClosedError extends TunnelError {
  override readonly name = 'ConnectionClosedError';
  readonly code = 'YT_ERR_CONNECTION_CLOSED';
}

/** The message of any thrown value, for logs. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** The `code` of a thrown value (errno or ours), if it has one. */
export function errorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : undefined;
}

/** An Error for any thrown value, keeping an Error as it is. */
export function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

export type ConfigErrorCode =
  /** A file named by a flag or a kubeconfig cannot be read. */
  | 'YT_ERR_FILE_UNREADABLE'
  /** A file does not hold what it should (a PEM certificate or key). */
  | 'YT_ERR_FILE_INVALID'
  /** The Kubernetes client configuration cannot be loaded or names no usable cluster. */
  | 'YT_ERR_KUBECONFIG'
  /** The certificate directory holds half a pair, no CA, or a CA the Go peers cannot read. */
  | 'YT_ERR_CERT_DIR'
  /** A Unix socket path is taken by a file that is not a socket. */
  | 'YT_ERR_SOCKET_PATH'
  /** A Unix socket path is a socket a live process answers on. */
  | 'YT_ERR_SOCKET_IN_USE';

/** A process cannot start with what it was given: the message names the flag or file and what to do. */
export class ConfigError extends CodedError<ConfigErrorCode> {
  override readonly name = 'ConfigError';
}

/** Something that cannot happen did (a bug of ours): the message says which promise broke. */
export class InternalError extends TunnelError {
  override readonly name = 'InternalError';
  readonly code = 'YT_ERR_INTERNAL';
}

/** The start-up rehearsal of the data path failed (logged; start-up goes on). */
export class RehearsalError extends TunnelError {
  override readonly name = 'RehearsalError';
  readonly code = 'YT_ERR_REHEARSAL';
}

/**
 * A connection (or dial) whose agent's link dropped without a goodbye and did
 * not come back within the resume window (proto/yurttunnel_ext.proto): it is
 * closed as failed on both sides.
 */
export class AgentLostError extends TunnelError {
  override readonly name = 'AgentLostError';
  readonly code = 'YT_ERR_AGENT_LOST';
}

export type ResumeErrorCode =
  /** A peer's count of packets received is outside what we sent and have not seen acknowledged. */
  | 'YT_ERR_RESUME_BAD_COUNT'
  /** A peer acknowledged packets we never sent. */
  | 'YT_ERR_RESUME_ACK_AHEAD'
  /** Control packets a peer does not acknowledge piled up past the session's limit. */
  | 'YT_ERR_RESUME_BUFFER_FULL'
  /** The server's resume memory budget was spent and this suspended session was the oldest holding some of it. */
  | 'YT_ERR_RESUME_BUDGET'
  /** A session token or claim in call metadata is malformed. */
  | 'YT_ERR_RESUME_BAD_CLAIM';

/** A session cannot be carried on (session resume, proto/yurttunnel_ext.proto). */
export class ResumeError extends CodedError<ResumeErrorCode> {
  override readonly name = 'ResumeError';
}
