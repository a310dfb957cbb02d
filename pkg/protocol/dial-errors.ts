// The words a DIAL_RSP error carries, and how a server reads them. Go agents
// send Go's error text ("dial tcp 10.0.0.1:10250: connect: connection refused",
// "... i/o timeout"); our agent uses the same wording, plus a policy phrase,
// so one reader serves both.

import type { DialFailureReason } from './errors.js';

/** The phrase our agent puts in a DIAL_RSP error when its allow-list forbids the address. */
export const DENIED_BY_POLICY = 'denied by policy';

export function deniedByPolicyMessage(address: string, allowed: string): string {
  return `dial tcp ${address}: ${DENIED_BY_POLICY} (the agent's --allowed-destinations allows ${allowed})`;
}

export function timeoutMessage(address: string, ms: number): string {
  return `dial tcp ${address}: i/o timeout (no answer within ${ms} ms)`;
}

/** Classifies an agent's DIAL_RSP error text. */
export function classifyAgentDialError(text: string): DialFailureReason {
  const t = text.toLowerCase();
  if (t.includes(DENIED_BY_POLICY)) return 'YT_ERR_DIAL_DENIED';
  // Phrases with spaces: a host name in the same text cannot contain them.
  if (t.includes('i/o timeout') || t.includes('deadline exceeded') || t.includes('timed out')) return 'YT_ERR_DIAL_TIMEOUT';
  return 'YT_ERR_DIAL_FAILED';
}
