// Certificates from the cluster's CertificateSigningRequest API
// (certificates.k8s.io/v1): create a CSR, wait until it is approved and
// signed, return the certificate. Approval is someone else's job (the
// server's CSR approver, csr-approver.ts); while it is pending, a log line
// says which CSR waits.

import type { V1CertificateSigningRequest } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { apiErrorMessage } from './errors.js';
import { CertificateRequestError } from '../certs/errors.js';
import { sleep } from '../timers/sleep.js';

import type { KeyUsage } from '../certs/certificate-manager.js';

export type { KeyUsage };

export interface CsrRequest {
  /** Prefix of the CSR object's generated name, e.g. `yurttunnel-server-`. */
  namePrefix: string;
  /** PEM PKCS#10 request. */
  csr: string;
  signerName: string;
  usages: KeyUsage[];
  /** Asked-for lifetime (spec.expirationSeconds; the signer may shorten it, 600 at least). */
  expirationSeconds?: number;
}

export interface CsrSignerOptions {
  /** How often the CSR is read while it waits. */
  pollMs?: number;
  /** How often the "still waiting" line is logged. */
  remindMs?: number;
  logger: Logger;
}

export class CsrSigner {
  private readonly pollMs: number;
  private readonly remindMs: number;

  constructor(
    private readonly client: KubeClient,
    private readonly opts: CsrSignerOptions,
  ) {
    this.pollMs = opts.pollMs ?? 1000;
    this.remindMs = opts.remindMs ?? 30_000;
  }

  /** Where certificates come from, for log lines. */
  get description(): string {
    return `CertificateSigningRequests at ${this.client.server}`;
  }

  /** Creates the CSR and resolves with the signed PEM certificate; rejects when denied, failed or aborted. */
  async sign(req: CsrRequest, signal?: AbortSignal): Promise<string> {
    const created = await this.client.certificates.createCertificateSigningRequest({
      body: {
        apiVersion: 'certificates.k8s.io/v1',
        kind: 'CertificateSigningRequest',
        metadata: { generateName: req.namePrefix },
        spec: {
          request: Buffer.from(req.csr).toString('base64'),
          signerName: req.signerName,
          usages: req.usages,
          ...(req.expirationSeconds !== undefined ? { expirationSeconds: req.expirationSeconds } : {}),
        },
      },
    });
    const name = created.metadata?.name ?? '';
    const log = this.opts.logger.child({ csr: name, signer: req.signerName });
    log.info('certificate signing request created; waiting for it to be approved and signed');
    const started = Date.now();
    let reminded = started;
    let csr: V1CertificateSigningRequest = created;
    for (;;) {
      const outcome = this.outcome(name, csr);
      if (outcome !== undefined) {
        log.info('certificate issued', { afterMs: Date.now() - started });
        return outcome;
      }
      if (!(await sleep(this.pollMs, signal))) signal?.throwIfAborted();
      try {
        csr = await this.client.certificates.readCertificateSigningRequest({ name });
      } catch (err: unknown) {
        log.warn('cannot read the certificate signing request; retrying', { error: apiErrorMessage(err) });
      }
      if (Date.now() - reminded >= this.remindMs) {
        reminded = Date.now();
        const approved = this.condition(csr, 'Approved') !== undefined;
        log.info(
          approved
            ? 'certificate signing request approved, still waiting for the signer to issue it'
            : `certificate signing request still waiting for approval (the tunnel server's CSR approver logs why it leaves one pending)`,
          { waitingMs: reminded - started },
        );
      }
    }
  }

  /** The certificate when issued; throws when denied or failed; undefined while pending. */
  private outcome(name: string, csr: V1CertificateSigningRequest): string | undefined {
    for (const type of ['Denied', 'Failed']) {
      const c = this.condition(csr, type);
      if (c !== undefined) {
        throw new CertificateRequestError(
          'YT_ERR_CSR_DENIED',
          `certificate signing request ${name} was ${type.toLowerCase()}: ${c.reason ?? ''}${c.message ? ` (${c.message})` : ''}`,
        );
      }
    }
    const cert = csr.status?.certificate;
    if (cert === undefined || cert === '') return undefined;
    // Typed reads decode bytes fields to strings already; a raw base64 string is decoded here.
    return cert.includes('-----BEGIN') ? cert : Buffer.from(cert, 'base64').toString('utf8');
  }

  private condition(csr: V1CertificateSigningRequest, type: string): { reason?: string; message?: string } | undefined {
    return csr.status?.conditions?.find((c) => c.type === type && c.status !== 'False');
  }
}
