// Negotiation of yurt-tunnel's per-connection flow control
// (proto/yurttunnel_ext.proto). Each side announces the receive window it
// grants per connection; only when both did is flow control on for the link.

/** Metadata (agent → server) and response header (server → agent). */
export const CONN_WINDOW_HEADER = 'yurttunnel-conn-window';

/**
 * Default receive window per connection, as announced: what a new connection
 * may put in flight before the receiver has measured anything. Small, because
 * over a slow edge uplink all of it queues in front of the node's other
 * connections (128 KiB is half a second at 2 Mbit/s); a fast path widens it
 * within a few grants (receive-window.ts).
 */
export const DEFAULT_CONN_WINDOW = 128 * 1024;

const MIN_WINDOW = 16 * 1024;
const MAX_WINDOW = 64 * 1024 * 1024;

/** Flow-control settings of one connection, from its side. */
export interface FlowWindows {
  /** What the peer allows us to have in flight on the connection. */
  sendWindow: number;
  /** What we allow the peer (and will buffer). */
  receiveWindow: number;
  /** The path's round trip, once the link has measured one (receive-window.ts sizes windows by it). */
  roundTripMs?: () => number | undefined;
}

/** Parses an announced window; undefined when absent or unusable (then flow control stays off). */
export function parseConnWindow(values: readonly string[]): number | undefined {
  if (values.length !== 1 || !/^\d{1,10}$/.test(values[0]!)) return undefined;
  const n = Number(values[0]);
  return n >= MIN_WINDOW && n <= MAX_WINDOW ? n : undefined;
}
