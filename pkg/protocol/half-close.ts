// Negotiation of yurt-tunnel's half-close (CLOSE_WRITE, proto/yurttunnel_ext.proto).
// The agent announces it in its call metadata and the server answers with the
// same response header; only when both did is it on for the link.

export const HALF_CLOSE_HEADER = 'yurttunnel-half-close';

/** Whether a peer announced half-close (exactly one value, "1"). */
export function announcesHalfClose(values: readonly string[]): boolean {
  return values.length === 1 && values[0] === '1';
}
