// What a server link needs of the call it was dialled (transport-choice.ts),
// whichever the transport: the packet call, what its keepalive pings through
// and counts as heard, whether it is gone already, and its ends reported to
// the link (a connection closed, or half-closed by the server).

import { ClientPacketCall } from '../grpc/client-call.js';
import { transportBytesRead, type Pingable } from '../grpc/keepalive.js';
import type { GrpcPacketStreamOptions } from '../grpc/packet-stream.js';
import { WsPings } from '../grpc/ws-pings.js';
import type { Logger } from '../log/logger.js';
import type { DialedCall } from './transport-choice.js';
import { WsClientCall } from './ws-client-call.js';

export interface LinkTransport {
  call: ClientPacketCall | WsClientCall;
  pings: Pingable;
  /** Bytes read from the peer so far (anything heard proves the path). */
  received: () => number;
  gone: () => boolean;
}

export function linkTransport(
  dialed: DialedCall,
  opts: Omit<GrpcPacketStreamOptions, 'wholeMessages'>,
  log: Logger,
  ended: (call: ClientPacketCall | WsClientCall, reason: string) => void,
): LinkTransport {
  if (dialed.transport === 'grpc') {
    const { session, stream } = dialed;
    const call = new ClientPacketCall(stream, opts, dialed.socket);
    session.on('error', (err: Error) => log.verbose(2, 'connection error', { error: err.message }));
    session.once('close', () => ended(call, 'connection closed'));
    // A connection the server's side closed (FIN) without a GOAWAY is lost too; HTTP/2 would wait for the liveness check.
    session.socket.once('end', () => ended(call, 'the server closed the connection'));
    return { call, pings: session, received: transportBytesRead(session), gone: () => session.destroyed || stream.destroyed };
  }
  const { ws, socket } = dialed;
  const call = new WsClientCall(ws, opts, socket);
  socket.once('end', () => ended(call, 'the server closed the connection'));
  return { call, pings: new WsPings(ws), received: () => socket.bytesRead, gone: () => ws.readyState !== ws.OPEN };
}
