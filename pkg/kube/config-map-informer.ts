// An informer on one ConfigMap, by namespace and name (a field selector), for
// components that follow or own a single ConfigMap.

import type { V1ConfigMap } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Informer } from './informer.js';

export function configMapInformer(client: KubeClient, namespace: string, name: string, logger: Logger): Informer<V1ConfigMap> {
  return new Informer<V1ConfigMap>({
    name: `${namespace}/configmaps/${name}`,
    list: (opts) => client.core.listNamespacedConfigMap({ namespace, ...opts }),
    watchPath: `/api/v1/namespaces/${namespace}/configmaps`,
    fieldSelector: `metadata.name=${name}`,
    watch: client.watch,
    logger,
  });
}
