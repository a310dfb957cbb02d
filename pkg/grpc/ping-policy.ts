// The server's side of gRPC keepalive enforcement, as grpc-go servers do it
// (internal/transport/http2_server.go, handlePing): a client's PING is
// forgiven whenever we wrote a DATA or HEADERS frame since its previous PING;
// otherwise a PING sooner than `minTimeMs` after the previous one is a strike,
// and after more than `maxStrikes` strikes the connection is told GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings" — once — and closed.
//
// grpc-go counts frames its writer put on the wire. node:http2 does not say
// when a frame leaves, but the callback of a write on an Http2Stream fires once
// nghttp2 has written all of it to the socket. So "a DATA frame was written
// since the last PING" is tracked as: a write completed since the last PING,
// or a write is still outstanding (nghttp2 is sending it, frame by frame, as
// the peer's window allows). grpc-go clients ping while they receive a large
// message (BDP estimation), and each of those pings is forgiven here because
// the message is still being written. A peer that withholds window updates
// while pinging is forgiven too; the keepalive timeout still bounds it.
// HEADERS (responses, trailers) are sent without flow control and count as
// written when queued.

export interface PingPolicyOptions {
  /** Pings closer than this without our traffic in between are strikes (Go's EnforcementPolicy.MinTime). */
  minTimeMs: number;
  /** More strikes than this close the connection. Go: 2. */
  maxStrikes?: number;
  /** Clock, for tests. Default Date.now. */
  now?: () => number;
}

/** What to do with a PING: nothing, or send GOAWAY too_many_pings (returned once). */
export type PingVerdict = 'ok' | 'strike' | 'too_many_pings';

export const TOO_MANY_PINGS = 'too_many_pings';

export class PingPolicy {
  /** Settable: a connection carrying a resumable call lets the agent's liveness pings through (session resume). */
  minTimeMs: number;
  private readonly maxStrikes: number;
  private readonly now: () => number;
  private lastPingAt: number | undefined;
  private strikes = 0;
  private outstandingWrites = 0;
  private wroteSinceLastPing = false;
  private tripped = false;

  constructor(opts: PingPolicyOptions) {
    this.minTimeMs = opts.minTimeMs;
    this.maxStrikes = opts.maxStrikes ?? 2;
    this.now = opts.now ?? Date.now;
  }

  /** A DATA write was handed to HTTP/2; pair with `writeDone`. */
  writeQueued(): void {
    this.outstandingWrites++;
  }

  /** A DATA write finished (written to the socket, or failed). */
  writeDone(): void {
    if (this.outstandingWrites > 0) this.outstandingWrites--;
    this.wroteSinceLastPing = true;
  }

  /** HEADERS (response headers or trailers) were sent. */
  headersSent(): void {
    this.wroteSinceLastPing = true;
  }

  get strikeCount(): number {
    return this.strikes;
  }

  /** A non-ACK PING arrived. */
  onPing(): PingVerdict {
    const now = this.now();
    const forgiven = this.wroteSinceLastPing || this.outstandingWrites > 0;
    const early = this.lastPingAt !== undefined && now - this.lastPingAt < this.minTimeMs;
    this.lastPingAt = now;
    this.wroteSinceLastPing = false;
    if (this.tripped) return 'ok';
    if (forgiven) {
      this.strikes = 0;
      return 'ok';
    }
    if (!early) return 'ok';
    this.strikes++;
    if (this.strikes <= this.maxStrikes) return 'strike';
    this.tripped = true;
    return TOO_MANY_PINGS;
  }
}
