// The server's start-up rehearsal (pkg/grpc/data-path-rehearsal.ts says why): a private
// Tunnel with the server's strategies and a private HTTP CONNECT proxier on a
// Unix socket in a temp folder, and a stand-in agent on the private loopback
// link, attached as the agent endpoint attaches a resumable agent. Callers
// then CONNECT through the proxier to an echo target on 127.0.0.1 and make
// 1-byte round trips, so the server's real path (request head, dial, DIAL_REQ,
// TunnelRelay, the session's ResumableLink, AgentCall) runs before the first
// caller. The tunnel and proxier are not the server's: nothing here is counted
// in its metrics, shown in /debug, or logged but the summary line, and all of
// it is closed before start-up goes on.

import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from '../metrics/prom.js';
import { carryAgentPackets, openAgentCall } from '../endpoint/agent-call.js';
import { PingPolicy } from '../grpc/ping-policy.js';
import { HttpConnectServer } from '../frontend/http-connect.js';
import { ClientPacketCall } from '../grpc/client-call.js';
import {
  REHEARSAL_CONNECTIONS,
  REHEARSAL_ROUND_TRIPS,
  StandInRelay,
  echoRoundTrips,
  endConnection,
  openRehearsalLink,
  routeToRelays,
  untilClosed,
  withinDeadline,
  type RehearsalLink,
  type RehearsalOptions,
  type RehearsalResult,
} from '../grpc/data-path-rehearsal.js';
import { silentLogger } from '../log/logger.js';
import { ResumableLink } from '../mux/resumable-link.js';
import type { SocketRelay } from '../mux/socket-relay.js';
import { RehearsalError } from '../protocol/errors.js';
import { DEFAULT_CONN_WINDOW, type FlowWindows } from '../protocol/flow-control.js';
import { emptyIdentifiers } from '../protocol/identifiers.js';
import type { DialRequestPacket, Packet } from '../protocol/packet.js';
import type { ProxyStrategy } from '../tunnel/backend-registry.js';
import { Tunnel } from '../tunnel/tunnel.js';

export interface ServerRehearsalOptions extends RehearsalOptions {
  strategies: readonly ProxyStrategy[];
  /** The server's resume window; 0 rehearses an agent without session resume. */
  resumeWindowMs: number;
}

const AGENT_ID = 'start-up-rehearsal';

export async function rehearseServer(opts: ServerRehearsalOptions): Promise<RehearsalResult> {
  const started = performance.now();
  const connections = opts.connections ?? REHEARSAL_CONNECTIONS;
  const roundTrips = opts.roundTrips ?? REHEARSAL_ROUND_TRIPS;
  const dir = await mkdtemp(join(tmpdir(), 'yurt-tunnel-rehearsal-'));
  const tunnel = new Tunnel({ strategies: opts.strategies, logger: silentLogger(), metricsRegistry: opts.metricsRegistry ?? new Registry() });
  const proxier = new HttpConnectServer(tunnel, {
    path: join(dir, 'proxier.sock'),
    name: 'rehearsal',
    logger: silentLogger(),
    metricsRegistry: new Registry(),
  });
  let link: RehearsalLink | undefined;
  let agentLink: ResumableLink | undefined;
  try {
    link = await openRehearsalLink(opts.tls, {});
    const l = link;
    await withinDeadline(
      (async () => {
        await proxier.start();
        const flow = { sendWindow: DEFAULT_CONN_WINDOW, receiveWindow: DEFAULT_CONN_WINDOW };
        const identifiers = { ...emptyIdentifiers(), ipv4: ['127.0.0.1'], host: ['127.0.0.1'], defaultRoute: true };
        const info = { agentID: AGENT_ID, identifiers, remoteAddress: '127.0.0.1', certSubject: '', flow, halfClose: true };
        // As the agent endpoint opens and starts a real agent's call: with a ping policy tracking its writes, metrics, a logger.
        const call = openAgentCall(l.stream, tunnel, {
          writeTracker: new PingPolicy({ minTimeMs: 0 }),
          onControlRefused: () => {},
          logger: silentLogger(),
        });
        const resume = opts.resumeWindowMs > 0;
        const owner = { agentID: AGENT_ID, fingerprint: '', identityVerified: false };
        const windowMs = resume ? opts.resumeWindowMs : undefined;
        const admitted = tunnel.sessions.admit({ link: call, info, owner, windowMs, claim: undefined, answer: () => {} });
        carryAgentPackets(admitted, call, () => {});
        agentLink = standInAgent(l, flow, resume);
        for (let c = 1; c <= connections; c++) {
          const caller = l.track(connect({ path: join(dir, 'proxier.sock') }));
          await connectThrough(caller, l.targetAddress);
          await echoRoundTrips(caller, roundTrips, `rehearsal connection ${c}`);
          endConnection(caller, c % 2 === 1);
          await untilClosed(caller);
        }
      })(),
    );
  } finally {
    agentLink?.close();
    await proxier.close();
    await tunnel.close();
    await link?.close();
    await rm(dir, { recursive: true, force: true });
  }
  return { connections, roundTrips, ms: performance.now() - started };
}

/**
 * The stand-in agent: answers each DIAL_REQ by connecting to the target and
 * relaying it, over a resumable link when the server offers resume (returned,
 * to be closed), else over the call itself.
 */
function standInAgent(l: RehearsalLink, flow: FlowWindows, resume: boolean): ResumableLink | undefined {
  const call = new ClientPacketCall(l.request);
  if (!resume) {
    call.start({ onPacket: agentPackets(l, flow, () => call), onClose: () => {} });
    return undefined;
  }
  const link: ResumableLink = new ResumableLink({ onPacket: agentPackets(l, flow, () => link), onBroken: () => call.cancel('rehearsal session broken') });
  call.start({ onPacket: (p) => link.receive(call, p), onClose: () => {} });
  link.attach(call, 0);
  return link;
}

function agentPackets(l: RehearsalLink, flow: FlowWindows, link: () => ResumableLink | ClientPacketCall): (p: Packet) => void {
  const relays = new Map<bigint, SocketRelay>();
  let nextConnectID = 1n;
  const dial = (p: DialRequestPacket): void => {
    const socket = l.track(connect({ port: Number(l.targetAddress.split(':')[1]), host: '127.0.0.1', noDelay: true }));
    socket.once('connect', () => {
      const connectID = nextConnectID++;
      const relay = new StandInRelay(link(), connectID, { flow, halfClose: true });
      relays.set(connectID, relay);
      relay.onClose = () => relays.delete(connectID);
      link().sendControl({ type: 'DIAL_RSP', random: p.random, connectID, error: '' });
      relay.attach(socket);
    });
  };
  return (p) => {
    if (p.type === 'DIAL_REQ') dial(p);
    else routeToRelays(relays, p);
  };
}

/** Sends CONNECT for `address` and waits for the proxier's 200. */
function connectThrough(caller: Socket, address: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let head = '';
    const onData = (b: Buffer): void => {
      head += b.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      caller.off('data', onData);
      caller.off('close', onClose);
      if (!head.startsWith('HTTP/1.1 200')) reject(new RehearsalError(`the rehearsal's CONNECT was answered ${JSON.stringify(head.split('\r\n')[0])}`));
      else resolve();
    };
    const onClose = (): void => reject(new RehearsalError("the rehearsal's CONNECT was closed unanswered"));
    caller.on('data', onData);
    caller.once('close', onClose);
    caller.write(`CONNECT ${address} HTTP/1.1\r\nHost: ${address}\r\n\r\n`);
  });
}
