// The mark a master port puts on every request it forwards, and looks for on
// every request it receives: a Via element (RFC 9110 §7.6.3, which exists to
// avoid request loops). A request that carries it came out of a tunnel into a
// master port, of this server or of a replica: it can only be a loop, as no
// kubelet forwards to a tunnel server. It is the second guard, for what the
// address check cannot see (a load balancer, a NAT, a port forward in front
// of the server); a hop that drops headers drops it too, so the addresses
// remain the first (frontend/loop-guard.ts).

/** Our Via element's received-by: a pseudonym, naming no host. */
const VIA_BY = 'yurt-tunnel-server';
const VIA = `1.1 ${VIA_BY}`;

/** A forwarded request's raw header list (name, value, …) with our Via added. */
export function withLoopMark(headers: string[]): string[] {
  headers.push('Via', VIA);
  return headers;
}

/** Whether a request's Via (all its lines, comma-joined) says a yurt-tunnel-server forwarded it. */
export function markedByTunnel(via: string | undefined): boolean {
  if (via === undefined) return false;
  return via.split(',').some((element) => element.trim().split(/\s+/)[1]?.toLowerCase() === VIA_BY);
}
