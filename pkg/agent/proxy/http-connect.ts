// A tunnel through an HTTP(S) proxy with CONNECT (RFC 9110 §9.3.6), using
// node:http's own client: it parses the proxy's answer, hands over the socket
// with any bytes read past it, and speaks TLS to an https:// proxy, so no
// library is needed. Basic credentials go in Proxy-Authorization. Through an
// https:// proxy our TLS to the server runs inside the TLS to the proxy.

import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP, type Socket } from 'node:net';
import { errorCode, errorMessage } from '../../protocol/errors.js';
import { ProxyError } from '../errors.js';
import { isUntrustedChain } from '../server-dial-hints.js';
import { abortReason, authority, type SocketTarget } from './tcp.js';
import type { ProxyServer } from './proxy-config.js';

export function connectThroughHttpProxy(proxy: ProxyServer, target: SocketTarget, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortReason(signal));
    const where = authority(target);
    const headers: Record<string, string> = { host: where };
    if (proxy.credentials !== undefined) {
      const { username, password } = proxy.credentials;
      headers['proxy-authorization'] = `Basic ${Buffer.from(`${username}:${password}`).toString('base64')}`;
    }
    const options = { host: proxy.host, port: proxy.port, method: 'CONNECT', path: where, headers, setHost: false, agent: false };
    const req =
      proxy.protocol === 'https'
        ? httpsRequest({ ...options, servername: isIP(proxy.host) === 0 ? proxy.host : undefined, ca: proxy.ca })
        : httpRequest(options);
    let settled = false;
    const finish = (err: Error | undefined, socket?: Socket): void => {
      if (settled) return;
      settled = true;
      signal.removeEventListener('abort', onAbort);
      if (err === undefined) return resolve(socket!);
      req.destroy();
      socket?.destroy();
      reject(err);
    };
    const onAbort = (): void => finish(abortReason(signal));
    signal.addEventListener('abort', onAbort, { once: true });
    req.on('error', (err: Error) => finish(proxyFailed(proxy, where, err)));
    req.once('connect', (res: IncomingMessage, socket: Socket, head: Buffer) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status > 299) {
        const answer = `${status} ${res.statusMessage ?? ''}`.trim();
        return finish(new ProxyError('YT_ERR_PROXY_REFUSED', `proxy ${proxy.display} (${proxy.namedBy}) refused CONNECT to ${where}: ${answer}`), socket);
      }
      // Bytes the server sent right after the proxy's answer belong to the TLS handshake.
      if (head.length > 0) socket.unshift(head);
      finish(undefined, socket);
    });
    req.end();
  });
}

/** Certificate verdicts on an https:// proxy other than an unknown CA. */
const REFUSED_CERTIFICATE = new Set(['ERR_TLS_CERT_ALTNAME_INVALID', 'CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);

/** Why the proxy could not be used; a certificate we refuse or a missing TLS is the proxy's fault, so the server goes unnamed. */
function proxyFailed(proxy: ProxyServer, where: string, err: Error): ProxyError {
  const named = `proxy ${proxy.display} (${proxy.namedBy})`;
  if (isUntrustedChain(err)) {
    const fix = proxy.ca === undefined ? "give the agent the proxy's CA with --proxy-ca-file" : 'its chain does not lead to a CA in --proxy-ca-file';
    return new ProxyError('YT_ERR_PROXY_FAILED', `${named}: its certificate is not trusted (${errorMessage(err)}): ${fix}`, { cause: err });
  }
  if (REFUSED_CERTIFICATE.has(errorCode(err) ?? '')) {
    return new ProxyError('YT_ERR_PROXY_FAILED', `${named}: its certificate is refused: ${errorMessage(err)}`, { cause: err });
  }
  // OpenSSL's words for a reply that is not a TLS record (code ERR_SSL_WRONG_VERSION_NUMBER, or EPROTO on a write).
  if (proxy.protocol === 'https' && /wrong version number/.test(err.message)) {
    return new ProxyError('YT_ERR_PROXY_FAILED', `${named} answered without TLS: is it an http:// proxy?`, { cause: err });
  }
  return new ProxyError('YT_ERR_PROXY_FAILED', `${named} for ${where}: ${errorMessage(err)}`, { cause: err });
}
