// grpc-js reports a failed TLS handshake as "Failed to connect", which tells an
// operator nothing. After such a failure the agent makes one plain TLS
// connection with the same settings and reports what actually went wrong.

import { checkServerIdentity, connect, type PeerCertificate } from 'node:tls';
import { errorMessage } from '../protocol/errors.js';

export interface TLSProbeOptions {
  host: string;
  port: number;
  /** SNI to send. */
  servername: string;
  /** Name or IP the server certificate must carry. */
  verifyName: string;
  ca: string;
  cert: string;
  key: string;
  timeoutMs?: number;
}

/** Resolves with a one-line explanation (never rejects). */
export function probeTLS(opts: TLSProbeOptions): Promise<string> {
  return new Promise((resolve) => {
    let done = false;
    let secure = false;
    const socket = connect({
      host: opts.host,
      port: opts.port,
      servername: opts.servername,
      ca: opts.ca,
      cert: opts.cert,
      key: opts.key,
      ALPNProtocols: ['h2'],
      checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(opts.verifyName, cert),
    });
    const finish = (text: string): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(text);
    };
    const timer = setTimeout(
      () => finish(secure ? 'TLS handshake succeeded; the failure is above TLS (HTTP/2 or gRPC)' : 'TLS handshake timed out'),
      opts.timeoutMs ?? 2000,
    );
    socket.on('secureConnect', () => {
      secure = true;
      if (socket.alpnProtocol !== 'h2') finish(`the server did not agree to HTTP/2 (ALPN ${String(socket.alpnProtocol)})`);
    });
    socket.on('error', (err) => {
      const text = errorMessage(err);
      if (/certificate required|unknown ca|bad certificate|decrypt error/i.test(text)) {
        finish(`the server refused this agent's client certificate (${text}); is it issued by the CA the server trusts?`);
      } else {
        finish(`${secure ? 'the server ended the TLS connection' : 'TLS handshake with the server failed'}: ${text}`);
      }
    });
    socket.on('close', () => {
      finish(
        secure
          ? "the server closed the connection right after the TLS handshake: it most likely does not trust this agent's " +
              'client certificate (issued by a CA other than the one the server was given)'
          : 'the connection closed during the TLS handshake',
      );
    });
  });
}
