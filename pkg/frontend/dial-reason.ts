// The reason a frontend gives for a failed dial: the tunnel's message, led by
// the node the address belongs to when the message does not name it already
// (kube-apiserver shows this text to the kubectl user).

import { errorMessage } from '../protocol/errors.js';

export type NodeNameOf = (host: string) => string | undefined;

export function dialFailureReason(err: unknown, host: string, nodeNameOf: NodeNameOf | undefined): string {
  const message = errorMessage(err);
  const node = nodeNameOf?.(host);
  if (node === undefined || message.includes(`agent ${node} `)) return message;
  return `node ${node}: ${message}`;
}
