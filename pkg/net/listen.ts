// Listening and closing, as every listener of the server does them: listen()
// settles once, with the error (EADDRINUSE, EACCES) as a rejection instead of
// an 'error' event nobody hears; stopListening() resolves whether or not the
// server was listening. A server listening through here constructs the sockets
// it accepts from complete options (socket-options.ts: no maps of their own).

import type { ListenOptions, Server } from 'node:net';
import { acceptWithSocketDefaults } from './socket-options.js';

export function listen(server: Server, options: ListenOptions): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options, () => {
      server.off('error', reject);
      acceptWithSocketDefaults(server);
      resolve();
    });
  });
}

/** Stops taking connections; resolves once those open have closed (or at once if it was not listening). */
export function stopListening(server: Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => resolve()));
}
