// The errors of pkg/iptables, on the shared bases in pkg/protocol/errors.ts.

import { CodedError } from '../protocol/errors.js';

export type IptablesErrorCode =
  /** An iptables, ip6tables or conntrack command is not on the PATH. */
  | 'YT_ERR_IPTABLES_MISSING'
  /** The process may not change the nat table (no NET_ADMIN capability, not root). */
  | 'YT_ERR_IPTABLES_PERMISSION'
  /** A command ran and failed. */
  | 'YT_ERR_IPTABLES_FAILED';

/** The iptables manager could not read or write the nat table. */
export class IptablesError extends CodedError<IptablesErrorCode> {
  override readonly name = 'IptablesError';
}
