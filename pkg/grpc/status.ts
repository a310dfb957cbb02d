// gRPC status codes, their names, and the `grpc-status` / `grpc-message`
// trailers that carry them (grpc/doc/statuscodes.md, PROTOCOL-HTTP2.md).

export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
} as const;

const NAMES: ReadonlyMap<number, string> = new Map(Object.entries(GrpcStatus).map(([name, code]) => [code, name]));

/** "UNAVAILABLE" for 14; "status 99" for a code gRPC does not define. */
export function grpcStatusName(code: number): string {
  return NAMES.get(code) ?? `status ${code}`;
}

/**
 * Percent-encodes a grpc-message value as the gRPC spec asks: UTF-8 bytes
 * outside printable ASCII, and '%' itself, become %XX; the rest stays.
 */
export function encodeGrpcMessage(message: string): string {
  let out = '';
  for (const byte of Buffer.from(message, 'utf8')) {
    out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

/** The text of a grpc-message value; one that is not valid percent-encoding is returned as sent. */
export function decodeGrpcMessage(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The trailers (or trailers-only headers) that end a call with `code` and `message`. */
export function statusTrailers(code: number, message: string): Record<string, string> {
  const out: Record<string, string> = { 'grpc-status': String(code) };
  if (message !== '') out['grpc-message'] = encodeGrpcMessage(message);
  return out;
}

/** "UNAVAILABLE: server shutting down" from grpc-status and grpc-message header values. */
export function describeGrpcStatus(status: string | undefined, message: string | undefined): string {
  const name = status === undefined ? 'no status' : /^\d+$/.test(status) ? grpcStatusName(Number(status)) : `status ${status}`;
  const text = message === undefined || message === '' ? '' : `: ${decodeGrpcMessage(message)}`;
  return name + text;
}
