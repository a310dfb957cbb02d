// What the tunnel records when one of its connections ends: a note for a
// stalled one it closed, the closed-connections metric (by how it ended),
// and the access line, one per tunnelled connection.

import type { Logger } from '../log/logger.js';
import { ConnectionStalledError, errorCode } from '../protocol/errors.js';
import type { TunnelMetrics } from './metrics.js';

/** What is recorded of an ended connection, whichever shape it had (a TunnelConn or a TunnelRelay). */
export interface EndedConnection {
  readonly agentID: string;
  readonly address: string;
  readonly connectID: bigint;
  readonly bytesSent: number;
  readonly bytesReceived: number;
  readonly openedAt: number;
  /** Session resumes the connection lived through. */
  readonly resumes: number;
}

/** `err` is the failure that ended the connection, null for a clean end. */
export function recordConnectionEnd(conn: EndedConnection, err: Error | null, metrics: TunnelMetrics, log: Logger): void {
  const ended = err === null ? 'closed' : (errorCode(err) ?? 'error');
  metrics.connectionClosed(/^[A-Za-z_]+$/.test(ended) ? ended : 'error', conn.bytesSent, conn.bytesReceived);
  // Built only for a log line: most connections end with none.
  if (!log.enabled(2)) return;
  const where = { agentID: conn.agentID, dialAddress: conn.address, connectID: conn.connectID.toString() };
  if (err instanceof ConnectionStalledError) {
    log.verbose(2, 'closed a stalled connection', { ...where, reason: err.code, error: err.message });
  }
  log.verbose(2, 'connection ended', {
    ...where,
    bytesToAgent: conn.bytesSent,
    bytesFromAgent: conn.bytesReceived,
    durationMs: Date.now() - conn.openedAt,
    resumes: conn.resumes,
    ended,
    ...(err !== null ? { error: err.message } : {}),
  });
}
