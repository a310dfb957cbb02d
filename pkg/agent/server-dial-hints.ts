// What an agent pointed at the wrong thing is told: OpenSSL's words for the
// usual mistakes (the master port, a plain HTTP port, a server whose
// certificate another CA signed) turned into what to do. The OpenSSL text
// stays in the message and as the error's `cause`.

import { connect, type DetailedPeerCertificate } from 'node:tls';
import { errorCode } from '../protocol/errors.js';

const AGENT_PORT = "agents connect to the server's --tunnel-agent-connect-port, 10262 by default";

/** OpenSSL's verdicts on a chain that does not lead to a CA we were given. */
const UNTRUSTED_CHAIN = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_SIGNATURE_FAILURE',
]);

/** What to do about a connection error that says which port the agent reached; undefined when it says nothing of the kind. */
export function wrongPortHint(err: unknown): string | undefined {
  switch (errorCode(err)) {
    // Alert 120: a TLS server that speaks no HTTP/2 (the master port serves HTTP/1.1 only).
    case 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL':
      return `answered TLS without HTTP/2 (h2): that is likely the server's master port (--secure-port, 10263 by default); ${AGENT_PORT}`;
    // A reply that is not a TLS record: plain text, most likely an HTTP port.
    case 'ERR_SSL_WRONG_VERSION_NUMBER':
      return (
        "answered without TLS (plain HTTP?): that is not the agent port (perhaps the server's --insecure-port, 10264, " +
        `or its --meta-port, 10265); ${AGENT_PORT}`
      );
    default:
      return undefined;
  }
}

/** OpenSSL's short reason ("wrong version number") for a message; the whole text stays in the error's cause. */
export function opensslReason(err: Error): string {
  const reason = (err as { reason?: unknown }).reason;
  return typeof reason === 'string' && reason !== '' ? `OpenSSL: ${reason}` : err.message.trim();
}

/** Whether the error is the server's certificate chain not leading to our CA. */
export function isUntrustedChain(err: unknown): boolean {
  const code = errorCode(err);
  return code !== undefined && UNTRUSTED_CHAIN.has(code);
}

/** The hint for a server certificate from another CA, given what the server presented (or undefined if that could not be read). */
export function untrustedChainHint(presented: string | undefined): string {
  const what = presented === undefined ? 'a certificate' : `a certificate ${presented}`;
  return (
    `presented ${what} that the agent's CA (--ca-file; in cluster mode the cluster's CA) did not sign: ` +
    "give the agent the CA of the server's certificate (in local mode the server's <cert-dir>/ca.crt), or point it at the right server"
  );
}

function commonName(name: { CN?: string | string[] } | undefined): string {
  const cn = name?.CN;
  return Array.isArray(cn) ? cn.join('+') : (cn ?? '');
}

/** "for CN=… issued by CN=…" from a peer's chain, and the chain's root when the server sent one above the issuer. */
function describeChain(leaf: DetailedPeerCertificate): string {
  let root = leaf;
  // A chain ends where a certificate is its own issuer or the issuer is missing; bounded anyway.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined past the chain the server sent, whatever @types/node says
  for (let i = 0; i < 10 && root.issuerCertificate !== undefined && root.issuerCertificate !== root; i++) root = root.issuerCertificate;
  const issuer = commonName(leaf.issuer);
  const rootCN = commonName(root.subject);
  const rootText = root === leaf || rootCN === issuer ? '' : ` (chain root CN=${rootCN})`;
  return `for CN=${commonName(leaf.subject)} issued by CN=${issuer}${rootText}`;
}

/**
 * Reads the certificate a server presents, without trusting it and without
 * presenting ours: for the message only, after the real (verified) handshake
 * failed. Sends nothing but the handshake; undefined if it cannot be read.
 */
export function presentedCertificate(
  target: { host: string; port: number; servername: string },
  timeoutMs: number,
  signal: AbortSignal | undefined,
): Promise<string | undefined> {
  return new Promise((resolve) => {
    if (signal?.aborted === true) return resolve(undefined);
    const socket = connect({ host: target.host, port: target.port, servername: target.servername, rejectUnauthorized: false, ALPNProtocols: ['h2'] });
    let settled = false;
    const done = (text: string | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      socket.destroy();
      resolve(text);
    };
    const onAbort = (): void => done(undefined);
    const timer = setTimeout(onAbort, timeoutMs);
    timer.unref();
    signal?.addEventListener('abort', onAbort, { once: true });
    socket.once('secureConnect', () => {
      const leaf = socket.getPeerCertificate(true);
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- {} when the server sent no certificate, whatever @types/node says
      done(leaf.subject === undefined ? undefined : describeChain(leaf));
    });
    socket.on('error', () => done(undefined));
  });
}
