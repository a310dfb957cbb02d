// What /debug/agents and /debug/connections show: plain objects read from the
// registry at the moment of the request.

import type { Backend } from './backend.js';
import type { BackendRegistry } from './backend-registry.js';

export interface AgentStatus {
  agentID: string;
  identifiers: Backend['identifiers'];
  serverID: string;
  remoteAddress: string;
  connectedSince: string;
  openConnections: number;
  pendingDials: number;
  /** Bytes over the stream's life (ended connections and open ones): to the node, and from it. */
  bytesToAgent: number;
  bytesFromAgent: number;
  lastKeepaliveRoundTripMs: number | null;
  draining: boolean;
  /** Its link dropped without a goodbye; its connections wait for the agent to resume (session resume). */
  suspended: boolean;
  suspendedSince: string | null;
  /** Times its session was resumed. */
  resumes: number;
  /** The resume window of its session, null without resume. */
  resumeWindowMs: number | null;
  /** Several streams of one agent show as several entries; this tells them apart. */
  stream: number;
}

export interface ConnectionStatus {
  agentID: string;
  connectID: string;
  address: string;
  openedSince: string;
  bytesToAgent: number;
  bytesFromAgent: number;
}

export function agentStatuses(registry: BackendRegistry, serverID: string): AgentStatus[] {
  return registry.all().map((b) => {
    let toAgent = b.endedBytes.toAgent;
    let fromAgent = b.endedBytes.fromAgent;
    for (const c of b.conns.values()) {
      toAgent += c.bytesSent;
      fromAgent += c.bytesReceived;
    }
    const rtt = b.roundTripMs();
    return {
      agentID: b.agentID,
      identifiers: b.identifiers,
      serverID,
      remoteAddress: b.remoteAddress,
      connectedSince: new Date(b.connectedAt).toISOString(),
      openConnections: b.conns.size,
      pendingDials: b.pendingDialCount,
      bytesToAgent: toAgent,
      bytesFromAgent: fromAgent,
      lastKeepaliveRoundTripMs: rtt === undefined ? null : Math.round(rtt * 1000) / 1000,
      draining: b.draining,
      suspended: b.suspended,
      suspendedSince: b.session?.suspendedAt !== undefined ? new Date(b.session.suspendedAt).toISOString() : null,
      resumes: b.resumes,
      resumeWindowMs: b.session?.windowMs ?? null,
      stream: b.serial,
    };
  });
}

/** Open connections, of one agent when `agentID` is given. */
export function connectionStatuses(registry: BackendRegistry, agentID?: string): ConnectionStatus[] {
  const out: ConnectionStatus[] = [];
  for (const b of registry.all()) {
    if (agentID !== undefined && b.agentID !== agentID) continue;
    for (const c of b.conns.oldestFirst()) {
      out.push({
        agentID: b.agentID,
        connectID: String(c.connectID),
        address: c.address,
        openedSince: new Date(c.openedAt).toISOString(),
        bytesToAgent: c.bytesSent,
        bytesFromAgent: c.bytesReceived,
      });
    }
  }
  return out;
}
