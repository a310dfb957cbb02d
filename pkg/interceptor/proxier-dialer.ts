// Opens a tunnelled connection through the proxier's Unix socket, as
// OpenYurt's interceptor does: writes a CONNECT request, accepts only a 200,
// and turns any other answer into an error that carries the proxier's status
// and reason. Our master ports dial the tunnel in-process and no longer use
// it; the demo and the bench do, as a local caller of the proxier.

import { addAbortListener } from 'node:events';
import { connect, type Socket } from 'node:net';
import { DialError, errorMessage } from '../protocol/errors.js';
import { ProxierError } from './errors.js';
import { readResponseHead, type RawResponseHead } from './response-head.js';

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

/**
 * Resolves with the tunnelled socket once the proxier answered 200, in its
 * initial mode: the caller's first 'data' listener or pipe() starts the flow.
 */
export async function dialThroughProxier(opts: ProxierDialOptions): Promise<Socket> {
  const cancelled = (): DialError => new DialError('YT_ERR_DIAL_CANCELLED', `dial to ${opts.address} through the proxier was aborted`);
  if (opts.signal?.aborted === true) throw cancelled();
  const socket = connect(opts.udsPath);
  socket.once('connect', () => socket.write(connectRequest(opts.address, opts.proxyHost, opts.userAgent)));
  const onAbort = opts.signal === undefined ? undefined : addAbortListener(opts.signal, () => socket.destroy(cancelled()));
  try {
    let head: RawResponseHead;
    try {
      head = await readResponseHead(socket, MAX_ANSWER_BYTES);
    } catch (err: unknown) {
      if (err instanceof DialError) throw err;
      throw new ProxierError(0, errorMessage(err), opts.address, { cause: err });
    }
    if (head.status !== 200) throw new ProxierError(head.status, await firstLineOfBody(socket, head.rest), opts.address);
    if (head.rest.length > 0) socket.unshift(head.rest);
    return socket;
  } catch (err: unknown) {
    socket.destroy();
    throw err;
  } finally {
    onAbort?.[Symbol.dispose]();
  }
}

/** The first line of a refusal's body (the proxier's reason), read until the proxier closes or MAX_ANSWER_BYTES. */
function firstLineOfBody(socket: Socket, start: Buffer): Promise<string> {
  return new Promise((resolve) => {
    let body = start;
    const done = (): void => {
      socket.off('data', onData);
      socket.off('end', done);
      socket.off('error', done);
      resolve(body.toString('utf8').trim().split('\n')[0] ?? '');
    };
    const onData = (chunk: Buffer): void => {
      body = Buffer.concat([body, chunk]);
      if (body.length > MAX_ANSWER_BYTES) done();
    };
    if (socket.readableEnded) return done();
    socket.on('data', onData);
    socket.once('end', done);
    socket.once('error', done);
  });
}
