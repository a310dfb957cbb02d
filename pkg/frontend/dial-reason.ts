// The reason a frontend gives for a failed dial: the tunnel's message, led by
// the node the address belongs to when no agent took the dial (a message
// about an agent's attempt names that agent, the node, already).
// kube-apiserver shows this text to the kubectl user.

import { DialError, errorMessage } from '../protocol/errors.js';

export type NodeNameOf = (host: string) => string | undefined;

export function dialFailureReason(err: unknown, host: string, nodeNameOf: NodeNameOf | undefined): string {
  const message = errorMessage(err);
  const agentTried = err instanceof DialError && err.code !== 'YT_ERR_NO_AGENT' && err.code !== 'YT_ERR_TUNNEL_CLOSED';
  const node = agentTried ? undefined : nodeNameOf?.(host);
  return node === undefined ? message : `node ${node}: ${message}`;
}
