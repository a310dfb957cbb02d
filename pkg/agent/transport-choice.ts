// Which transport the agent dials a server with (`--transport`): gRPC, a
// WebSocket, or `auto`, gRPC first and a WebSocket when the path refuses
// HTTP/2 (no ALPN h2, an HTTP/1.1 answer, a preface mangled on the way); the
// transport that worked for an address is tried first from then on, for the
// life of the process. A refusal our server sent itself (a gRPC status) is
// an answer, not a broken path: no fallback for it; nor for a failure the
// other transport would meet the same way before any HTTP is spoken (no
// route, a refused port, plain text where TLS was expected, an untrusted
// certificate). When both fail, the first one's error leads (its hints name
// the usual mistakes) and the second's follows.

import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { ServerConnectionError } from './errors.js';
import { isUntrustedChain } from './server-dial-hints.js';
import { failedBeforeTls, dialServer, refusedByServer, type DialTarget, type GrpcDialedCall } from './server-dial.js';
import type { WsDialedCall } from './server-dial-ws.js';

/** The WebSocket dial, loaded at its first use: an agent whose gRPC works never loads the ws package. */
async function dialWebSocket(t: DialTarget, log: Logger, signal?: AbortSignal): Promise<WsDialedCall> {
  const ws = await import('./server-dial-ws.js');
  return ws.dialWebSocket(t, log, signal);
}

/** A call the server answered, over gRPC or over a WebSocket. */
export type DialedCall = GrpcDialedCall | WsDialedCall;

/** What worked last for each server address, in this process. */
const worked = new Map<string, 'grpc' | 'websocket'>();

/** Dials `t` over its transport (auto: the one that worked last first, then the other). */
export async function dialServerLink(t: DialTarget, log: Logger, signal?: AbortSignal): Promise<DialedCall> {
  const transport = t.transport ?? 'auto';
  if (transport === 'grpc') return dialServer(t, log, signal);
  if (transport === 'websocket') return dialWebSocket(t, log, signal);
  const first = worked.get(t.address) ?? 'grpc';
  const second = first === 'grpc' ? 'websocket' : 'grpc';
  try {
    const dialed = await dialOver(first, t, log, signal);
    worked.set(t.address, first);
    return dialed;
  } catch (err: unknown) {
    if (signal?.aborted === true || !(err instanceof ServerConnectionError) || !otherMayWork(err)) throw err;
    log.verbose(2, `${first} to the tunnel server failed; trying ${second === 'grpc' ? 'gRPC' : 'a WebSocket'}`, { error: errorMessage(err) });
    let dialed: DialedCall;
    try {
      dialed = await dialOver(second, t, log, signal);
    } catch (again: unknown) {
      throw new ServerConnectionError(err.code, `${err.message}; over ${second === 'grpc' ? 'gRPC' : 'a WebSocket'}: ${errorMessage(again)}`, { cause: err });
    }
    if (worked.get(t.address) !== second)
      log.info(`the tunnel server is reached over ${second === 'grpc' ? 'gRPC' : 'a WebSocket'} from now on`, { address: t.address });
    worked.set(t.address, second);
    return dialed;
  }
}

/**
 * Socket errors the other transport would meet the same way, before any HTTP
 * is spoken. A reset or a timeout says the path broke, not that it refuses
 * HTTP/2 (an L7 balancer refuses h2 by ALPN or an HTTP/1.1 answer): the next
 * dial tries the same transport again instead of moving the agent to the
 * WebSocket for the life of the process.
 */
const SAME_PATH_FAILURES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ERR_SSL_WRONG_VERSION_NUMBER',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
]);

/** Whether a failed dial says nothing against the other transport. */
function otherMayWork(err: ServerConnectionError): boolean {
  if (refusedByServer.has(err) || failedBeforeTls.has(err)) return false;
  const cause = err.cause;
  if (cause === undefined) return true;
  const code = (cause as { code?: unknown }).code;
  return !(typeof code === 'string' && SAME_PATH_FAILURES.has(code)) && !isUntrustedChain(cause);
}

function dialOver(transport: 'grpc' | 'websocket', t: DialTarget, log: Logger, signal: AbortSignal | undefined): Promise<DialedCall> {
  return transport === 'grpc' ? dialServer(t, log, signal) : dialWebSocket(t, log, signal);
}

/** Forgets what worked (tests). */
export function forgetTransports(): void {
  worked.clear();
}
