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

/**
 * Why the agent could not open a connection it was asked for. `code` is the
 * socket's errno (ECONNREFUSED, ENOTFOUND, ...) or one of ours; the message
 * uses Go's wording, which servers classify (dial-errors.ts).
 */
export class AgentDialError extends CodedError<string> {
  override readonly name = 'AgentDialError';
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

export type IptablesErrorCode =
  /** An iptables, ip6tables or conntrack command is not on the PATH. */
  | 'YT_ERR_IPTABLES_MISSING'
  /** The process may not change the nat table (no NET_ADMIN capability, not root). */
  | 'YT_ERR_IPTABLES_PERMISSION'
  /** A command ran and failed. */
  | 'YT_ERR_IPTABLES_FAILED';

/** The iptables manager could not read or write the nat table. */
export class IptablesError extends CodedError<IptablesErrorCode> {
  override readonly name = 'IptablesError';
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

/** An HPACK header block that cannot be decoded (RFC 7541). */
export class HpackError extends TunnelError {
  override readonly name = 'HpackError';
  readonly code = 'YT_ERR_HPACK';
}

/** A Huffman-coded HPACK string that cannot be decoded (EOS, bad padding, an unfinished code). */
export class HuffmanError extends TunnelError {
  override readonly name = 'HuffmanError';
  readonly code = 'YT_ERR_HPACK_HUFFMAN';
}

/**
 * HTTP/2 frames a client sent that break the framing rules or our announced limits (a header block cut by another
 * frame, a bad padding, a frame or header block too large). `http2Code` is the RFC 9113 error code for the GOAWAY.
 */
export class Http2FrameError extends TunnelError {
  override readonly name = 'Http2FrameError';
  readonly code = 'YT_ERR_HTTP2_FRAME';
  readonly http2Code: number;
  constructor(message: string, options?: { cause?: unknown; http2Code?: number }) {
    super(message, options);
    this.http2Code = options?.http2Code ?? 0x1; // PROTOCOL_ERROR
  }
}

export type WatchErrorCode =
  /** The resourceVersion watched from is older than the API server keeps (410 Gone): list again. */
  | 'YT_ERR_WATCH_EXPIRED'
  /** The watch ended with another error status. */
  | 'YT_ERR_WATCH_FAILED';

/** A Kubernetes watch that ended with an ERROR event; `statusCode` is the Status object's code. */
export class WatchError extends TunnelError {
  override readonly name = 'WatchError';
  constructor(
    readonly code: WatchErrorCode,
    readonly statusCode: number | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export type CertificateRequestErrorCode =
  /** The cluster denied the CertificateSigningRequest (or it failed). */
  | 'YT_ERR_CSR_DENIED'
  /** The request is not signed by the key it carries. */
  | 'YT_ERR_CSR_INVALID';

/** A certificate signing request that produced no certificate. */
export class CertificateRequestError extends CodedError<CertificateRequestErrorCode> {
  override readonly name = 'CertificateRequestError';
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
