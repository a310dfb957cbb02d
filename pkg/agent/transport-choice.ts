// Which transport the agent dials a server with (`--transport`): gRPC, a
// WebSocket, or `auto`, gRPC first and a WebSocket when the path refuses
// HTTP/2 (no ALPN h2, an HTTP/1.1 answer, a preface mangled on the way); the
// transport that worked for an address is tried first from then on, for the
// life of the process. A refusal our server sent itself (a gRPC status) is
// an answer, not a broken path: no fallback for it.

import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { dialServer, refusedByServer, type DialedCall, type DialTarget } from './server-dial.js';
import { dialWebSocket } from './server-dial-ws.js';

export type AgentTransport = 'auto' | 'grpc' | 'websocket';

export const AGENT_TRANSPORTS: readonly AgentTransport[] = ['auto', 'grpc', 'websocket'];

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
    if (signal?.aborted === true || (err instanceof Error && refusedByServer.has(err))) throw err;
    log.info(`${first} to the tunnel server failed; trying ${second === 'grpc' ? 'gRPC' : 'a WebSocket'}`, { error: errorMessage(err) });
    const dialed = await dialOver(second, t, log, signal);
    if (worked.get(t.address) !== second) log.info(`the tunnel server is reached over ${second === 'grpc' ? 'gRPC' : 'a WebSocket'} from now on`, { address: t.address });
    worked.set(t.address, second);
    return dialed;
  }
}

function dialOver(transport: 'grpc' | 'websocket', t: DialTarget, log: Logger, signal: AbortSignal | undefined): Promise<DialedCall> {
  return transport === 'grpc' ? dialServer(t, log, signal) : dialWebSocket(t, log, signal);
}

/** Forgets what worked (tests). */
export function forgetTransports(): void {
  worked.clear();
}
