// A tunnel through a SOCKS5 proxy (RFC 1928) with the username/password
// method (RFC 1929), by the `socks` package: a small, maintained client the
// project already had (through @kubernetes/client-node). We open the TCP
// connection to the proxy ourselves, so aborting is destroying our socket.
// socks5:// resolves the server's name here; socks5h:// lets the proxy do it.
// Imported on first use: agents without a SOCKS proxy never load it.

import { lookup } from 'node:dns/promises';
import { isIP, type Socket } from 'node:net';
import { errorMessage } from '../../protocol/errors.js';
import { ProxyError } from '../errors.js';
import { abortReason, authority, connectTCP, type SocketTarget } from './tcp.js';
import type { ProxyServer } from './proxy-config.js';

/** Errors of `socks` that are the proxy's answer (a refusal), not a broken conversation. */
const REFUSALS = /authentication failed|rejected|no ?accepted ?auth/i;

export async function connectThroughSocks5(proxy: ProxyServer, target: SocketTarget, signal: AbortSignal): Promise<Socket> {
  const where = authority(target);
  const named = `proxy ${proxy.display} (${proxy.namedBy})`;
  let host = target.host;
  if (proxy.protocol === 'socks5' && isIP(host) === 0) {
    try {
      host = (await lookup(host)).address;
    } catch (err: unknown) {
      throw new ProxyError(
        'YT_ERR_PROXY_FAILED',
        `${named}: cannot resolve ${target.host} for socks5:// (socks5h:// lets the proxy resolve it): ${errorMessage(err)}`,
        {
          cause: err,
        },
      );
    }
  }
  let socket: Socket;
  try {
    socket = await connectTCP({ host: proxy.host, port: proxy.port }, signal);
  } catch (err: unknown) {
    if (signal.aborted) throw err;
    throw new ProxyError('YT_ERR_PROXY_FAILED', `${named} for ${where}: ${errorMessage(err)}`, { cause: err });
  }
  const onAbort = (): void => void socket.destroy();
  signal.addEventListener('abort', onAbort, { once: true });
  try {
    const { SocksClient } = await import('./socks-client.js');
    await SocksClient.createConnection({
      proxy: { host: proxy.host, port: proxy.port, type: 5, userId: proxy.credentials?.username, password: proxy.credentials?.password },
      command: 'connect',
      destination: { host, port: target.port },
      existing_socket: socket,
    });
    return socket;
  } catch (err: unknown) {
    socket.destroy();
    if (signal.aborted) throw abortReason(signal);
    const text = errorMessage(err);
    const code = REFUSALS.test(text) ? 'YT_ERR_PROXY_REFUSED' : 'YT_ERR_PROXY_FAILED';
    throw new ProxyError(code, `${named} ${code === 'YT_ERR_PROXY_REFUSED' ? 'refused' : 'failed'} CONNECT to ${where}: ${text}`, { cause: err });
  } finally {
    signal.removeEventListener('abort', onAbort);
  }
}
