// A tunnel through an HTTP(S) proxy with CONNECT (RFC 9110 §9.3.6), using
// node:http's own client: it parses the proxy's answer, hands over the socket
// with any bytes read past it, and speaks TLS to an https:// proxy, so no
// library is needed. Basic credentials go in Proxy-Authorization.

import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { isIP, type Socket } from 'node:net';
import { errorMessage } from '../../protocol/errors.js';
import { ProxyError } from '../errors.js';
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
    const req = proxy.protocol === 'https' ? httpsRequest({ ...options, servername: isIP(proxy.host) === 0 ? proxy.host : undefined }) : httpRequest(options);
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
    req.on('error', (err: Error) =>
      finish(new ProxyError('YT_ERR_PROXY_FAILED', `proxy ${proxy.display} (${proxy.namedBy}) for ${where}: ${errorMessage(err)}`, { cause: err })),
    );
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
