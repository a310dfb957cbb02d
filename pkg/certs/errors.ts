// The errors of pkg/certs, on the shared bases in pkg/protocol/errors.ts.

import { CodedError } from '../protocol/errors.js';

export type CertificateRequestErrorCode =
  /** The cluster denied the CertificateSigningRequest (or it failed). */
  | 'YT_ERR_CSR_DENIED'
  /** The request is not signed by the key it carries. */
  | 'YT_ERR_CSR_INVALID';

/** A certificate signing request that produced no certificate. */
export class CertificateRequestError extends CodedError<CertificateRequestErrorCode> {
  override readonly name = 'CertificateRequestError';
}
