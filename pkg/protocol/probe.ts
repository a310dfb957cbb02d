// The agent's probe (--server-probe-interval): a dial made while it already
// holds a link to every server it knows of, to find a replica added behind the
// address. It says so in its call metadata ("yurttunnel-probe: 1"). A server
// the agent already holds a link to gets a duplicate that the agent closes at
// once: not a connection event, so that server logs it only at a verbose level.

export const PROBE_HEADER = 'yurttunnel-probe';

/** Whether a call says it is a probe (exactly one value, "1"). */
export function announcesProbe(values: readonly string[]): boolean {
  return values.length === 1 && values[0] === '1';
}
