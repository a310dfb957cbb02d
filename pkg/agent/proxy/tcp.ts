// A plain TCP connection that an AbortSignal ends, and the small helpers the
// proxy clients share.

import { connect, type Socket } from 'node:net';

export interface SocketTarget {
  /** Host name or IP (without brackets). */
  host: string;
  port: number;
}

/** A TCP connection to host:port; `signal` ends the attempt. */
export function connectTCP(target: SocketTarget, signal: AbortSignal): Promise<Socket> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(abortReason(signal));
    const socket = connect({ host: target.host, port: target.port });
    const onAbort = (): void => {
      socket.destroy();
      done(abortReason(signal));
    };
    const done = (err: Error | undefined): void => {
      signal.removeEventListener('abort', onAbort);
      socket.off('error', done);
      if (err === undefined) return resolve(socket);
      socket.destroy();
      reject(err);
    };
    signal.addEventListener('abort', onAbort, { once: true });
    socket.once('error', done);
    socket.once('connect', () => done(undefined));
  });
}

/** Why `signal` was aborted, as an Error. */
export function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error(`aborted: ${String(signal.reason)}`);
}

/** host:port as it goes into CONNECT and Host (an IPv6 address in brackets). */
export function authority(target: SocketTarget): string {
  return target.host.includes(':') ? `[${target.host}]:${target.port}` : `${target.host}:${target.port}`;
}
