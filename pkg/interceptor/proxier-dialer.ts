// Opens a tunnelled connection through the proxier's Unix socket, as
// OpenYurt's interceptor does: writes a CONNECT request, accepts only a 200,
// and turns any other answer into an error that carries the proxier's status
// and reason. Our master ports dial the tunnel in-process and no longer use
// it; the demo and the bench do, as a local caller of the proxier.

import { connect, type Socket } from 'node:net';
import { ProxierError } from '../protocol/errors.js';

const MAX_ANSWER_BYTES = 64 * 1024;


export interface ProxierDialOptions {
  /** The proxier's Unix socket. */
  udsPath: string;
  /** host:port to reach. */
  address: string;
  /** Sent as X-Tunnel-Proxy-Host: picks the agent (node) explicitly. */
  proxyHost?: string;
  userAgent?: string;
  signal?: AbortSignal;
}

/** The exact request OpenYurt's interceptor writes, each optional header only when set. */
export function connectRequest(address: string, proxyHost?: string, userAgent?: string): string {
  let req = `CONNECT ${address} HTTP/1.1\r\nHost: localhost`;
  if (proxyHost) req += `\r\nX-Tunnel-Proxy-Host: ${proxyHost}`;
  if (userAgent) req += `\r\nUser-Agent: ${userAgent}`;
  return req + '\r\n\r\n';
}

/** Resolves with the tunnelled socket once the proxier answered 200. */
export function dialThroughProxier(opts: ProxierDialOptions): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(opts.udsPath);
    let buf = Buffer.alloc(0);
    let headEnd = -1;
    let status = 0;
    let settled = false;
    const settle = (err?: Error): void => {
      if (settled) return;
      settled = true;
      socket.off('readable', onReadable);
      socket.off('end', onEnd);
      socket.off('error', onError);
      opts.signal?.removeEventListener('abort', onAbort);
      if (err !== undefined) {
        socket.destroy();
        reject(err);
        return;
      }
      // With the 'readable' listener gone the socket is back in its initial
      // mode: the caller's first 'data' listener or pipe() starts the flow.
      const rest = buf.subarray(headEnd + 4);
      if (rest.length > 0) socket.unshift(rest);
      resolve(socket);
    };
    const failWithBody = (): void => {
      const body = buf.subarray(headEnd + 4).toString('utf8').trim().split('\n')[0] ?? '';
      settle(new ProxierError(status, body, opts.address));
    };
    const onReadable = (): void => {
      let chunk: Buffer | null;
      while (!settled && (chunk = socket.read() as Buffer | null) !== null) {
        buf = Buffer.concat([buf, chunk]);
        if (headEnd < 0) {
          headEnd = buf.indexOf('\r\n\r\n');
          if (headEnd < 0) {
            if (buf.length > MAX_ANSWER_BYTES) settle(new ProxierError(0, 'answer head too large', opts.address));
            continue;
          }
          const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.toString('latin1', 0, headEnd));
          status = m === null ? 0 : Number(m[1]);
          if (status === 200) {
            settle();
            return;
          }
        }
        if (buf.length > MAX_ANSWER_BYTES) failWithBody();
      }
    };
    const onEnd = (): void => {
      if (headEnd >= 0) failWithBody();
      else settle(new ProxierError(0, `connection closed after ${buf.length} bytes`, opts.address));
    };
    const onError = (err: Error): void => settle(new ProxierError(0, err.message, opts.address, { cause: err }));
    const onAbort = (): void => settle(new Error(`dial to ${opts.address} through the proxier was aborted`));
    if (opts.signal?.aborted) {
      onAbort();
      return;
    }
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    socket.on('readable', onReadable);
    socket.once('end', onEnd);
    socket.once('error', onError);
    socket.once('connect', () => socket.write(connectRequest(opts.address, opts.proxyHost, opts.userAgent)));
  });
}
