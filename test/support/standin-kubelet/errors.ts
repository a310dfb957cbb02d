// Error classes of the stand-in kubelet and its protocol helpers, each with a
// stable `code`.

export class WebSocketProtocolError extends Error {
  override readonly name = 'WebSocketProtocolError';
  readonly code = 'YT_ERR_WS_PROTOCOL';
  /** The RFC 6455 close code to send for this error. */
  readonly closeCode: number;
  constructor(message: string, closeCode: number) {
    super(message);
    this.closeCode = closeCode;
  }
}

export class SpdyProtocolError extends Error {
  override readonly name = 'SpdyProtocolError';
  readonly code = 'YT_ERR_SPDY_PROTOCOL';
}

/** The peer reset a SPDY stream (RST_STREAM) with a status other than CANCEL. */
export class SpdyStreamResetError extends Error {
  override readonly name = 'SpdyStreamResetError';
  readonly code = 'YT_ERR_SPDY_STREAM_RESET';
  readonly status: number;
  constructor(streamId: number, status: number) {
    super(`SPDY stream ${streamId} was reset by the peer with status ${status}`);
    this.status = status;
  }
}

/** The SPDY session ended while a stream or request on it was still open. */
export class SpdySessionClosedError extends Error {
  override readonly name = 'SpdySessionClosedError';
  readonly code = 'YT_ERR_SPDY_SESSION_CLOSED';
}

/** A byte stream did not match the /bytes pattern. */
export class PatternMismatchError extends Error {
  override readonly name = 'PatternMismatchError';
  readonly code = 'YT_ERR_PATTERN_MISMATCH';
  readonly index: number;
  constructor(index: number, expected: number, actual: number) {
    super(`byte ${index} is 0x${actual.toString(16)}, expected 0x${expected.toString(16)}`);
    this.index = index;
  }
}

/** A waiting helper (wait for a request, a response head, ...) gave up. */
export class StandinTimeoutError extends Error {
  override readonly name = 'StandinTimeoutError';
  readonly code = 'YT_ERR_STANDIN_TIMEOUT';
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** An upgrade request (SPDY or WebSocket) was answered with something other than 101. */
export class UpgradeRefusedError extends Error {
  override readonly name = 'UpgradeRefusedError';
  readonly code = 'YT_ERR_UPGRADE_REFUSED';
  readonly status: number;
  constructor(target: string, status: number, reason: string) {
    super(`upgrade of ${target} was refused with ${status} ${reason}`);
    this.status = status;
  }
}
