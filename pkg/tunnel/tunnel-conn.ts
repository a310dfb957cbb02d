// The server's side of a tunnelled connection: what `tunnel.dial()` resolves
// to. Ending it sends CLOSE_REQ and waits for the agent's CLOSE_RSP; ending it
// with an error says so in the CLOSE_REQ to agents that understand it (our
// half-close extension), so that the target is reset rather than closed.

import { serverClose } from '../mux/close-handshake.js';
import { PacketConn, type PacketConnOptions } from '../mux/packet-conn.js';
import type { PacketLink } from '../mux/packet-link.js';

/** The agent stream a connection rides on: its link, and who is at the other end. */
export interface TunnelConnAgent {
  readonly agentID: string;
  readonly link: PacketLink;
  /** The agent negotiated half-close, and with it reads CLOSE_REQ's error. */
  readonly halfClose: boolean;
  /** Times the agent's session was resumed so far (session resume); none when absent. */
  readonly resumes?: number;
}

export class TunnelConn extends PacketConn {
  readonly agentID: string;
  readonly address: string;
  private readonly agent: TunnelConnAgent;
  private readonly resumesAtOpen: number;

  constructor(agent: TunnelConnAgent, connectID: bigint, address: string, opts?: PacketConnOptions) {
    super(agent.link, connectID, serverClose(agent.halfClose), opts);
    this.agentID = agent.agentID;
    this.agent = agent;
    this.resumesAtOpen = agent.resumes ?? 0;
    this.address = address;
  }

  /** Times the agent's session was resumed while this connection was open: the blips it survived. */
  get resumes(): number {
    return (this.agent.resumes ?? 0) - this.resumesAtOpen;
  }

  // node:http's Agent refs a pooled connection when it reuses it (as it
  // would a net.Socket). A tunnelled connection holds no handle of its own,
  // and its timers are unref'd: there is nothing to do.
  ref(): this {
    return this;
  }

  unref(): this {
    return this;
  }
}
