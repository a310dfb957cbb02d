// What a connection table and a packet handler need of one multiplexed
// connection, whichever shape it has: a Duplex for callers in the same
// process (PacketConn), or a relay joined straight to a socket (SocketRelay).

export interface MuxConn {
  readonly connectID: bigint;
  /** Whether the peer has ended the connection. */
  readonly remoteClosed: boolean;
  /** Bytes received from / sent to the peer, for logs and metrics. */
  readonly bytesReceived: number;
  readonly bytesSent: number;
  /** When the connection was established (ms since the epoch). */
  readonly openedAt: number;
  /** A DATA packet of this connection arrived. */
  deliver(data: Buffer): void;
  /** WINDOW_UPDATE: the peer allows `bytes` more. */
  grantCredit(bytes: number): void;
  /** The peer ended the connection: cleanly (its final packet), or as a failure (`err`). */
  remoteClose(err?: Error): void;
  /** CLOSE_WRITE: the peer sends no more, and still reads. */
  remoteEndWrite(): void;
}
