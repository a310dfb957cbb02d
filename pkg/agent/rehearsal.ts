// The agent's start-up rehearsal (pkg/grpc/data-path-rehearsal.ts says why): a private
// ServerConnection, the very class that carries the agent's link to a server,
// adopts a call on the private loopback link, and a stand-in server sends it
// DIAL_REQs for an echo target on 127.0.0.1; each connection is then driven
// through the real dialer, LinkConnections, EndpointConn and the session's
// ResumableLink with 1-byte round trips, and ended by the caller. Nothing of
// it is counted in the agent's metrics or shown in /debug/connections (the
// ServerConnection is not in the client set), and it is closed before start-up
// goes on.

import {
  REHEARSAL_CONNECTIONS,
  REHEARSAL_ROUND_TRIPS,
  StandInServerRelay,
  endConnection,
  echoRoundTrips,
  openRehearsalLink,
  routeToRelays,
  untilClosed,
  withinDeadline,
  type RehearsalOptions,
  type RehearsalResult,
} from '../grpc/data-path-rehearsal.js';
import { ServerPacketCall } from '../grpc/server-call.js';
import { silentLogger } from '../log/logger.js';
import { ResumableLink } from '../mux/resumable-link.js';
import type { SocketRelay } from '../mux/socket-relay.js';
import { RehearsalError } from '../protocol/errors.js';
import { DEFAULT_CONN_WINDOW } from '../protocol/flow-control.js';
import { newDialID } from '../protocol/ids.js';
import type { DialResponsePacket, Packet } from '../protocol/packet.js';
import { AllowList } from './allow-list.js';
import { AgentMetrics } from './metrics.js';
import { DialLimit } from './dial-limit.js';
import { Dialer } from './dialer.js';
import { ServerConnection } from './server-connection.js';

export interface AgentRehearsalOptions extends RehearsalOptions {
  /** The agent's resume window; 0 rehearses a link without session resume. */
  resumeWindowMs: number;
}

export async function rehearseAgent(opts: AgentRehearsalOptions): Promise<RehearsalResult> {
  const started = performance.now();
  const connections = opts.connections ?? REHEARSAL_CONNECTIONS;
  const roundTrips = opts.roundTrips ?? REHEARSAL_ROUND_TRIPS;
  const link = await openRehearsalLink(opts.tls, {});
  let agent: ServerConnection | undefined;
  let serverLink: ResumableLink | undefined;
  try {
    await withinDeadline(
      (async () => {
        const flow = { sendWindow: DEFAULT_CONN_WINDOW, receiveWindow: DEFAULT_CONN_WINDOW };
        const resume = opts.resumeWindowMs > 0;
        agent = new ServerConnection({
          address: 'start-up rehearsal',
          tls: { ca: '', cert: '', key: '' },
          agentID: 'rehearsal',
          identifiers: '',
          dialer: new Dialer({ allowList: AllowList.parse(link.targetAddress) }),
          dialLimit: new DialLimit(connections),
          resumeWindowMs: opts.resumeWindowMs,
          logger: silentLogger(),
          // As the client set gives a real link: counted (in a registry of its own, never served), a shared keepalive, callbacks.
          metrics: new AgentMetrics(opts.metricsRegistry),
          keepalive: { timeMs: 35_000 },
          onConnectionClosed: () => {},
          onSuspended: () => {},
        });
        agent.adopt({
          transport: 'grpc',
          session: link.session,
          socket: link.socket,
          stream: link.request,
          identity: { serverID: 'rehearsal', serverCount: 1, flow, halfClose: true },
          offer: resume ? { token: 'rehearsal', windowMs: opts.resumeWindowMs } : undefined,
        });
        // The stand-in server: a packet call (numbered and acknowledged when the agent resumes), relays to callers.
        const relays = new Map<bigint, SocketRelay>();
        let answered: ((p: DialResponsePacket) => void) | undefined;
        const onPacket = (p: Packet): void => {
          if (p.type === 'DIAL_RSP') answered?.(p);
          else routeToRelays(relays, p);
        };
        const call = new ServerPacketCall(link.stream);
        const server = resume ? new ResumableLink({ onPacket, onBroken: () => call.abort('rehearsal session broken') }) : undefined;
        serverLink = server;
        call.start({ onPacket: server === undefined ? onPacket : (p) => server.receive(call, p), onClose: () => {} });
        server?.attach(call, 0);
        const send = server ?? call;
        for (let c = 1; c <= connections; c++) {
          const rsp = new Promise<DialResponsePacket>((resolve) => (answered = resolve));
          // A dial ID as the server makes them (64 random bits): small ones left the agent's varint decoder to deoptimise on the first real one.
          send.sendControl({ type: 'DIAL_REQ', protocol: 'tcp', address: link.targetAddress, random: newDialID() });
          const { connectID, error } = await rsp;
          if (error !== '') throw new RehearsalError(`the agent's dial of the echo target failed: ${error}`);
          const [caller, accepted] = await link.callerPair();
          const relay = new StandInServerRelay(send, connectID, { flow, halfClose: true });
          relays.set(connectID, relay);
          const closed = new Promise<void>((resolve) => (relay.onClose = () => resolve()));
          relay.attach(accepted);
          await echoRoundTrips(caller, roundTrips, `rehearsal connection ${connectID}`);
          endConnection(caller, c % 2 === 1);
          await closed;
          relays.delete(connectID);
          await untilClosed(caller);
        }
      })(),
    );
  } finally {
    agent?.close('start-up rehearsal over');
    serverLink?.close();
    await link.close();
  }
  return { connections, roundTrips, ms: performance.now() - started };
}
