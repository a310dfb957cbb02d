// Per-request options for the typed API calls: an AbortSignal, so that a call
// to an API server that stopped answering ends when its caller gives up.

import { Observable, type ConfigurationOptions } from '@kubernetes/client-node';

/** Options that end the request when `signal` aborts (e.g. `AbortSignal.timeout(ms)`). */
export function abortable(signal: AbortSignal): ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (request) => {
          request.setSignal(signal);
          return new Observable(Promise.resolve(request));
        },
        post: (response) => new Observable(Promise.resolve(response)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}
