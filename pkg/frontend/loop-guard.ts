// A connection must never come back into the tunnel through the server it
// came from (issue 35). Three checks, one counter:
// - own_listener: a dial whose address is one of this server's listeners
//   (net/own-listeners.ts) fails with YT_ERR_DIAL_LOOP (508) before anything
//   is sent to an agent. Every frontend's dials pass it (Tunnel's loopCheck).
// - via: a master-port request that already passed through a
//   yurt-tunnel-server (interceptor/loop-mark.ts) is answered 508. It catches
//   what the addresses cannot show: a load balancer, a NAT, a port forward
//   in front of this server.
// - waiting: the bound on nesting when both miss (a hop that drops the mark):
//   requests to one destination awaiting their answer head are bounded
//   (RequestInterceptor), as every hop of a loop waits for the next one.
// The CONNECT and gRPC frontends need no such bound: they relay bytes and
// make no request of their own, so each level of a nesting through them
// costs its caller a CONNECT of its own.
// Each refusal is logged once, rate-limited, by the part that answers it.

import { Counter, type Registry } from '../metrics/prom.js';
import { isLoopbackHost, isThisMachine, type OwnListeners } from '../net/own-listeners.js';
import { removePortFromHost } from '../protocol/identifiers.js';

export type LoopCheck = 'own_listener' | 'via' | 'waiting';

export class LoopGuard {
  private readonly counter: Counter<'check'> | undefined;

  constructor(
    readonly listeners: OwnListeners,
    registry?: Registry,
  ) {
    this.counter =
      registry === undefined
        ? undefined
        : new Counter({
            name: 'yurttunnel_server_loops_refused_total',
            help:
              'Connections refused because they would come back into this server through its tunnel, by check: own_listener ' +
              "(the dial's address is one of this server's listeners), via (the request already passed through a yurt-tunnel-server), " +
              'waiting (too many requests to one destination await their answer).',
            labelNames: ['check'],
            registers: [registry],
          });
  }

  /** Counts a refusal. */
  refused(check: LoopCheck): void {
    this.counter?.inc({ check });
  }

  /** The Tunnel's loopCheck: why a dial to `address` (host:port, checked) through `agent` would loop, or undefined. */
  dialRefusal(address: string, agent: { agentID: string; remoteAddress: string }): string | undefined {
    const host = removePortFromHost(address);
    const port = Number(address.slice(address.lastIndexOf(':') + 1));
    const here = (): boolean => isThisMachine(removePortFromHost(agent.remoteAddress));
    const own = this.listeners.reached(host, port, here);
    if (own === undefined) return undefined;
    this.refused('own_listener');
    const who = isLoopbackHost(host.toLowerCase())
      ? `, and agent ${agent.agentID} runs on this machine: the connection it would open`
      : `: the connection agent ${agent.agentID} would open`;
    return (
      `dial to ${address} refused: it is this tunnel server's own ${own.name} (listening on ${own.address})${who} comes back ` +
      'into the tunnel and loops; address the node itself (its name, or its IP and kubelet port), not the tunnel server'
    );
  }
}
