// A backend is one agent stream: the agent's identity, its packet link, and
// the connections established through it. connectIDs are chosen by the agent
// per server connection, so they are only unique within one backend.

import type { FlowWindows } from '../protocol/flow-control.js';
import type { AgentIdentifiers } from '../protocol/identifiers.js';
import type { KnownPacket } from '../protocol/packet.js';
import { ConnTable } from '../mux/conn-table.js';
import type { AgentLink } from './agent-link.js';
import type { Session } from './session-table.js';
import type { SessionLink } from './session-link.js';
import type { TunnelConn } from './tunnel-conn.js';
import type { TunnelRelay } from './tunnel-relay.js';
import { DEFAULT_MAX_UNKNOWN_PACKETS, UnknownPackets } from './unknown-packets.js';

export interface BackendInfo {
  agentID: string;
  identifiers: AgentIdentifiers;
  /** Where the agent connects from, for logs. */
  remoteAddress: string;
  /** Round trip of the last keepalive ping on the agent's connection, for /debug/agents. */
  roundTripMs?: () => number | undefined;
  /** Subject of the agent's client certificate, for logs. */
  certSubject: string;
  /** Per-connection flow control, when the agent announced it. */
  flow?: FlowWindows;
  /** Half-close (CLOSE_WRITE), when both ends announced it. */
  halfClose?: boolean;
  /** The agent said this call is a probe for another server (protocol/probe.ts). */
  probe?: boolean;
}

let nextBackendSerial = 1;

export class Backend {
  readonly agentID: string;
  readonly identifiers: AgentIdentifiers;
  /** Where the agent connects from (its newest call's, after a resume). */
  remoteAddress: string;
  /** Subject of the client certificate (its newest call's, after a resume with a renewed one). */
  certSubject: string;
  readonly flow: FlowWindows | undefined;
  readonly halfClose: boolean;
  readonly link: AgentLink;
  readonly connectedAt = Date.now();
  roundTripMs: () => number | undefined;
  /** Distinguishes several streams of one agent in logs. */
  readonly serial = nextBackendSerial++;
  draining = false;
  closed = false;
  /**
   * A probe from an agent that already has a live stream here: a duplicate it
   * closes at once, so its coming and going is logged at --v 2, not as a
   * connection event (protocol/probe.ts).
   */
  duplicateProbe = false;
  /** With session resume: the session and its link, which outlive the agent's calls. */
  session: Session<Backend> | undefined;
  sessionLink: SessionLink | undefined;
  /** Why the call last dropped, while the session waits for the agent (suspended). */
  suspendReason: string | undefined;

  /** Connections established through this stream. */
  readonly conns = new ConnTable<TunnelConn | TunnelRelay>();
  /** Bytes of the connections that have ended on this stream (its open ones count theirs), for /debug/agents. */
  readonly endedBytes = { toAgent: 0, fromAgent: 0 };
  /** Dials pending on this backend (kept by PendingDials). */
  pendingDialCount = 0;
  /** Packets the agent sent for connections it does not hold here. */
  readonly unknownPackets: UnknownPackets;

  constructor(info: BackendInfo, link: AgentLink, maxUnknownPackets = DEFAULT_MAX_UNKNOWN_PACKETS) {
    this.agentID = info.agentID;
    this.identifiers = info.identifiers;
    this.remoteAddress = info.remoteAddress;
    this.certSubject = info.certSubject;
    this.flow = info.flow;
    this.halfClose = info.halfClose === true;
    this.link = link;
    this.roundTripMs = info.roundTripMs ?? (() => undefined);
    this.unknownPackets = new UnknownPackets(maxUnknownPackets);
  }

  /** The link dropped without a goodbye; the connections wait for the agent to resume the session. */
  get suspended(): boolean {
    return this.session?.suspended === true;
  }

  /** Times the session was resumed (0 without resume). */
  get resumes(): number {
    return this.session?.resumes ?? 0;
  }

  send(packet: KnownPacket): boolean {
    return this.link.sendControl(packet);
  }
}
