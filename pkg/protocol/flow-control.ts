// Negotiation of yurt-tunnel's per-connection flow control
// (proto/yurttunnel_ext.proto). Each side announces the receive window it
// grants per connection; only when both did is flow control on for the link.

/** Metadata (agent → server) and response header (server → agent). */
export const CONN_WINDOW_HEADER = 'yurttunnel-conn-window';

/** Default receive window per connection, as announced. */
export const DEFAULT_CONN_WINDOW = 1024 * 1024;

/**
 * How far a receiver may widen a connection's window beyond the announced one
 * while its reader keeps up (see PacketConn._read). Widening needs no
 * negotiation: it is just a larger WINDOW_UPDATE.
 */
export const MAX_AUTO_WINDOW = 4 * 1024 * 1024;

const MIN_WINDOW = 16 * 1024;
const MAX_WINDOW = 64 * 1024 * 1024;

/** Flow-control settings of one connection, from its side. */
export interface FlowWindows {
  /** What the peer allows us to have in flight on the connection. */
  sendWindow: number;
  /** What we allow the peer (and will buffer). */
  receiveWindow: number;
}

/** Parses an announced window; undefined when absent or unusable (then flow control stays off). */
export function parseConnWindow(values: readonly string[]): number | undefined {
  if (values.length !== 1 || !/^\d{1,10}$/.test(values[0]!)) return undefined;
  const n = Number(values[0]);
  return n >= MIN_WINDOW && n <= MAX_WINDOW ? n : undefined;
}
