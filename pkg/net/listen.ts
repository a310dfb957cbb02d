// Listening and closing, as every listener of the server and the agent does
// them: listen() settles once, with the error (EADDRINUSE, EACCES) as a
// rejection instead of an 'error' event nobody hears; stopListening() resolves
// whether or not the server was listening. A server listening through here
// says in the log when it cannot accept, out of file descriptors above all
// (accept-failures.ts), instead of ending the process.

import type { ListenOptions, Server } from 'node:net';
import { reportAcceptFailures, type ListenerName } from './accept-failures.js';

export type { ListenerName } from './accept-failures.js';

// What to do about the errors a start-up can meet, to name beside the flag.
const LISTEN_HINTS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use: another process listens there (another yurt-tunnel-server or agent?); stop it, or choose another port',
  EACCES: 'permission denied: a port under 1024 needs root or CAP_NET_BIND_SERVICE',
  EADDRNOTAVAIL: 'no such address on this machine: choose one of its own addresses',
};

/** `--secure-port 127.0.0.1:10263: address already in use: …` from a listen error, keeping its code. */
function listenError(err: Error & { code?: string }, options: ListenOptions, who: ListenerName): Error {
  const hint = err.code === undefined ? undefined : LISTEN_HINTS[err.code];
  if (who.flag === undefined || hint === undefined || options.path !== undefined) return err;
  const host = options.host ?? '';
  const where = `${host.includes(':') ? `[${host}]` : host}:${options.port ?? 0}`;
  return Object.assign(new Error(`${who.flag} ${where}: ${hint} (${err.message})`, { cause: err }), { code: err.code });
}

export function listen(server: Server, options: ListenOptions, who: ListenerName): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => reject(listenError(err, options, who));
    server.once('error', onError);
    server.listen(options, () => {
      server.off('error', onError);
      reportAcceptFailures(server, who);
      resolve();
    });
  });
}

/** Stops taking connections; resolves once those open have closed (or at once if it was not listening). */
export function stopListening(server: Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => resolve()));
}
