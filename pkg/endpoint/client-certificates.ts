// Whose certificate an agent's call carries: the one its TLS handshake
// verified, or, from a trusted proxy (--trusted-proxy-cidrs), the one the
// proxy forwards in --forwarded-client-cert-header (forwarded-cert.ts). A
// forwarded certificate from any other peer is refused, as is a call from a
// trusted proxy that forwarded none and presented no valid one of its own.

import type { X509Certificate } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import { GrpcStatus } from '../grpc/status.js';
import type { AgentCertificate, Refusal } from './admission.js';
import { caCertificates, TrustedProxies, verifyForwardedCertificate } from './forwarded-cert.js';
import type { Arrival } from './served-call.js';

/** "CN=edge-1; DNS:edge-1" from the client certificate, for logs. */
export function peerCertSubject(cert: AgentCertificate | undefined): string {
  if (!cert?.subject) return '';
  return `CN=${String(cert.subject.CN ?? '')}${cert.subjectaltname ? `; ${cert.subjectaltname}` : ''}`;
}

/** The verified client certificate of a TLS connection (undefined without one, or one TLS did not verify). */
export function peerCertificateOf(socket: TLSSocket | undefined): AgentCertificate | undefined {
  if (socket?.authorized !== true) return undefined;
  const cert = socket.getPeerCertificate();
  return Object.keys(cert).length === 0 ? undefined : cert;
}

export class ClientCertificates {
  private readonly proxies: TrustedProxies;
  private cas: X509Certificate[];

  /** `header` lower case; `cidrs` may be empty (nothing forwarded is believed); `ca` the agent CA bundle. */
  constructor(
    private readonly header: string,
    cidrs: readonly string[],
    ca: string,
  ) {
    this.proxies = new TrustedProxies(cidrs);
    this.cas = caCertificates(ca);
  }

  /** A new agent CA (certificate rotation). */
  setCA(ca: string): void {
    this.cas = caCertificates(ca);
  }

  /** Whether `socket` comes from a trusted proxy. */
  trusts(socket: TLSSocket | undefined): boolean {
    return this.proxies.has(socket?.remoteAddress);
  }

  /** The certificate `arrival` is judged by (undefined: none, for the identity check to refuse), or why it is refused. */
  of(arrival: Arrival): { cert: AgentCertificate | undefined } | Refusal {
    const { socket, head } = arrival;
    const header = this.header;
    const forwarded = head.metadata(header);
    if (forwarded.length === 0) {
      if (socket?.authorized === true) return { cert: peerCertificateOf(socket) };
      return {
        code: GrpcStatus.UNAUTHENTICATED,
        message: `no client certificate: the trusted proxy ${arrival.remoteAddress} presented no valid one and forwarded none in ${header}`,
        by: 'identity',
      };
    }
    if (!this.trusts(socket)) {
      return {
        code: GrpcStatus.PERMISSION_DENIED,
        message: `a client certificate forwarded in ${header} is believed only from --trusted-proxy-cidrs, and ${arrival.remoteAddress} is not among them`,
        by: 'identity',
      };
    }
    if (forwarded.length > 1) {
      return { code: GrpcStatus.INVALID_ARGUMENT, message: `expected one ${header} header, got ${forwarded.length}`, by: 'identity' };
    }
    const cert = verifyForwardedCertificate(forwarded[0]!, this.cas);
    if (cert instanceof Error) return { code: GrpcStatus.UNAUTHENTICATED, message: `${cert.message} (header ${header})`, by: 'identity' };
    return { cert };
  }
}
