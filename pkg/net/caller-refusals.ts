// yurttunnel_server_refused_callers_total: callers a listener closed before
// they made a request, by listener and by why. Every listener counts its own
// under its name in the one counter of the registry it is given.

import type { TLSSocket } from 'node:tls';
import { Counter, type Registry } from '../metrics/prom.js';
import { errorCode, errorMessage } from '../protocol/errors.js';

/** Why a caller was closed before its request. */
export type RefusalReason = 'tls_handshake_timeout' | 'tls_error' | 'head_timeout';

const NAME = 'yurttunnel_server_refused_callers_total';

function refusedCallersCounter(registry: Registry): Counter<'listener' | 'reason'> {
  const existing = registry.getSingleMetric(NAME);
  if (existing !== undefined) return existing as Counter<'listener' | 'reason'>;
  return new Counter({
    name: NAME,
    help:
      'Connections closed before their request: tls_handshake_timeout (--tls-handshake-timeout), tls_error (no or a bad client ' +
      'certificate, not TLS), head_timeout (--request-head-timeout, --connect-head-timeout), by listener.',
    labelNames: ['listener', 'reason'],
    registers: [registry],
  });
}

/** The callers one listener refused, by reason; in `registry`'s counter when given one. */
export class CallerRefusals {
  private readonly tally = new Map<RefusalReason, number>();
  private readonly counter: Counter<'listener' | 'reason'> | undefined;

  constructor(
    private readonly listener: string,
    reasons: readonly RefusalReason[],
    registry?: Registry,
  ) {
    this.counter = registry === undefined ? undefined : refusedCallersCounter(registry);
    for (const reason of reasons) {
      this.tally.set(reason, 0);
      this.counter?.inc({ listener, reason }, 0);
    }
  }

  /** How many this listener has refused so far, by reason. */
  get counts(): Readonly<Partial<Record<RefusalReason, number>>> {
    return Object.fromEntries(this.tally);
  }

  /** Counts one; returns how many this listener has refused for `reason` so far (for its log line). */
  add(reason: RefusalReason): number {
    const n = (this.tally.get(reason) ?? 0) + 1;
    this.tally.set(reason, n);
    this.counter?.inc({ listener: this.listener, reason });
    return n;
  }
}

/** What a failed TLS handshake (a server's 'tlsClientError') counts as, and the reason to log. */
export function tlsRefusal(err: Error, socket: TLSSocket): { reason: 'tls_handshake_timeout' | 'tls_error'; error: string } {
  if (errorCode(err) === 'ERR_TLS_HANDSHAKE_TIMEOUT') return { reason: 'tls_handshake_timeout', error: errorMessage(err) };
  // Node destroys a socket whose client certificate fails verification and
  // reports only "socket hang up"; the verification result is kept here.
  const why = socket.authorizationError;
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- null or undefined when the certificate passed, whatever @types/node says
  return { reason: 'tls_error', error: why !== undefined && why !== null ? `client certificate rejected: ${String(why)}` : errorMessage(err) };
}
