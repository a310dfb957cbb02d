// Listening and closing, as every listener of the server and the agent does
// them: listen() settles once, with the error (EADDRINUSE, EACCES) as a
// rejection instead of an 'error' event nobody hears; stopListening() resolves
// whether or not the server was listening. A server listening through here
// constructs the sockets it accepts from complete options (socket-options.ts:
// no maps of their own), and says in the log when it cannot accept, out of
// file descriptors above all (accept-failures.ts), instead of ending the process.

import type { ListenOptions, Server } from 'node:net';
import { reportAcceptFailures, type ListenerName } from './accept-failures.js';
import { acceptWithSocketDefaults } from './socket-options.js';

export type { ListenerName } from './accept-failures.js';

export function listen(server: Server, options: ListenOptions, who: ListenerName): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options, () => {
      server.off('error', reject);
      acceptWithSocketDefaults(server);
      reportAcceptFailures(server, who);
      resolve();
    });
  });
}

/** Stops taking connections; resolves once those open have closed (or at once if it was not listening). */
export function stopListening(server: Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => resolve()));
}
