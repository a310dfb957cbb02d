// Level-based writes, as a controller's sync makes them: read the object as it
// is now, create it if missing, stop if it already says what we want,
// otherwise write a changed copy; when someone else wrote in between (409),
// read again and decide again.

import type { V1ConfigMap, V1Service } from '@kubernetes/client-node';
import type { KubeClient } from './client.js';
import { isNotFound } from './errors.js';
import { abortable } from './request-options.js';
import { retryOnConflict } from './retry.js';

export type EnsureOutcome = 'created' | 'updated' | 'unchanged';

export interface EnsureConfigMapOptions {
  namespace: string;
  name: string;
  /** The keys we own and their values; other keys are left as they are. */
  data: Record<string, string>;
  /** Who writes, as the API server records it in managedFields. */
  fieldManager: string;
  /** Ends the requests (a caller that gave up, or lost its lease). */
  signal?: AbortSignal;
}

/** Makes the ConfigMap hold `data` (creating it if missing); writes only when something differs. */
export function ensureConfigMapData(client: KubeClient, opts: EnsureConfigMapOptions): Promise<EnsureOutcome> {
  const { namespace, name, data, fieldManager } = opts;
  const options = opts.signal === undefined ? undefined : abortable(opts.signal);
  return retryOnConflict(async () => {
    let current: V1ConfigMap;
    try {
      current = await client.core.readNamespacedConfigMap({ namespace, name }, options);
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
      // Created by someone else meanwhile: 409 AlreadyExists, and retryOnConflict reads it again.
      await client.core.createNamespacedConfigMap({ namespace, fieldManager, body: { metadata: { namespace, name }, data } }, options);
      return 'created';
    }
    const have = current.data ?? {};
    if (Object.entries(data).every(([k, v]) => have[k] === v)) return 'unchanged';
    await client.core.replaceNamespacedConfigMap({ namespace, name, fieldManager, body: { ...current, data: { ...have, ...data } } }, options);
    return 'updated';
  });
}

export interface UpdateServiceOptions {
  namespace: string;
  name: string;
  /** The changed copy to write, or undefined when the Service already says what we want. */
  change(current: V1Service): V1Service | undefined;
  fieldManager: string;
  signal?: AbortSignal;
}

/** Applies `change` to the Service as it is now; 'missing' when there is no such Service. */
export function updateService(client: KubeClient, opts: UpdateServiceOptions): Promise<Exclude<EnsureOutcome, 'created'> | 'missing'> {
  const { namespace, name, fieldManager } = opts;
  const options = opts.signal === undefined ? undefined : abortable(opts.signal);
  return retryOnConflict(async () => {
    let current: V1Service;
    try {
      current = await client.core.readNamespacedService({ namespace, name }, options);
    } catch (err: unknown) {
      if (isNotFound(err)) return 'missing';
      throw err;
    }
    const next = opts.change(current);
    if (next === undefined) return 'unchanged';
    await client.core.replaceNamespacedService({ namespace, name, fieldManager, body: next }, options);
    return 'updated';
  });
}
