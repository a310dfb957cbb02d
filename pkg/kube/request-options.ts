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

/** A signal for one request: aborted by `parent`, or after `ms`; call `dispose()` when the request is over. */
export interface RequestDeadline {
  signal: AbortSignal;
  dispose(): void;
}

/**
 * Not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: the combined
 * signal holds its sources only weakly, and so does the timeout's own timer,
 * so a garbage collection before the deadline loses it and the request waits
 * forever (Node 20.20; test/unit/request-deadline.test.ts shows it). Here the
 * timer holds the controller.
 */
export function requestDeadline(parent: AbortSignal | undefined, ms: number): RequestDeadline {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new DOMException(`no answer within ${ms} ms`, 'TimeoutError')), ms);
  timer.unref();
  const onParentAbort = (): void => controller.abort(parent?.reason);
  if (parent?.aborted === true) onParentAbort();
  else parent?.addEventListener('abort', onParentAbort, { once: true });
  return {
    signal: controller.signal,
    dispose: () => {
      clearTimeout(timer);
      parent?.removeEventListener('abort', onParentAbort);
    },
  };
}
