// A resumable agent session as the tunnel's AgentLink (session resume,
// proto/yurttunnel_ext.proto): the connections write to the session's
// ResumableLink, which outlives the agent's calls; the call that carries it
// now is the transport. When that call drops without a goodbye the session
// has no transport (suspended) and its writers wait; a new call presenting
// the session's token takes it back and what the agent lacks is resent. The
// agent's packets do not pass here: the call hands them to `resumable`
// itself (sessions.ts), which takes them only from the call carrying it.

import { ResumableLink } from '../mux/resumable-link.js';
import type { ResumeBudget } from '../mux/resume-budget.js';
import { ConnectionClosedError, type ResumeError } from '../protocol/errors.js';
import type { KnownPacket, Packet } from '../protocol/packet.js';
import type { AgentLink, AgentLinkClose } from './agent-link.js';

export interface SessionLinkHandlers {
  /** A packet of the session, once, in order. */
  readonly onPacket: (packet: Packet) => void;
  /** The agent broke the session's numbering: it cannot go on. */
  readonly onBroken: (err: ResumeError) => void;
}

export class SessionLink implements AgentLink {
  readonly resumable: ResumableLink;
  private call: AgentLink | undefined;

  /** `budget`: the server's, shared with every other session (resume-budget.ts). */
  constructor(handlers: SessionLinkHandlers, budget?: ResumeBudget) {
    this.resumable = new ResumableLink({ onPacket: handlers.onPacket, onBroken: handlers.onBroken, budget });
  }

  /** The call carrying the session now, if any. */
  get transport(): AgentLink | undefined {
    return this.call;
  }

  /** No call carries the session now; the agent may come back. */
  get suspended(): boolean {
    return this.resumable.suspended;
  }

  /** Packets the session has received from the agent (what the agent resends after, on a resume). */
  get received(): number {
    return this.resumable.received;
  }

  /** `call` carries the session from now on; what the agent has not received after `peerReceived` is resent first. */
  attach(call: AgentLink, peerReceived: number): void {
    this.call = call;
    this.resumable.attach(call, peerReceived);
  }

  /** The call no longer carries the session (it dropped, or a resume supersedes it); returns it. */
  detach(): AgentLink | undefined {
    const call = this.call;
    this.call = undefined;
    this.resumable.detach();
    return call;
  }

  sendData(connectID: bigint, data: Buffer, cb: (err?: Error | null) => void): void {
    this.resumable.sendData(connectID, data, cb);
  }

  sendControl(packet: KnownPacket): boolean {
    return this.resumable.sendControl(packet);
  }

  pauseReceive(holder: object): void {
    this.resumable.pauseReceive(holder);
  }

  resumeReceive(holder: object): void {
    this.resumable.resumeReceive(holder);
  }

  /** Ends the session: its held writers fail, and the call carrying it (if any) ends with `end`. */
  close(end: AgentLinkClose): void {
    const call = this.detach();
    this.resumable.close(new ConnectionClosedError(end.message));
    call?.close(end);
  }
}
