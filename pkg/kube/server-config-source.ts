// The server's ConfigMap, live: an informer on `kube-system/yurt-tunnel-server-cfg`
// alone, its data parsed on every add and update, and the defaults again when
// it is deleted (OpenYurt keeps the last value then). Subscribers hear of
// every change of the parsed value, not of resyncs that change nothing.

import type { V1ConfigMap } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Informer } from './informer.js';
import {
  defaultServerConfig,
  describeServerConfig,
  parseServerConfig,
  sameServerConfig,
  SERVER_CONFIGMAP,
  type ServerConfig,
  type ServerConfigDefaults,
} from './server-config.js';
import { TUNNEL_NAMESPACE } from './tunnel-addresses.js';

export type ServerConfigListener = (now: ServerConfig, before: ServerConfig) => void;

export interface ServerConfigSourceOptions extends ServerConfigDefaults {
  logger: Logger;
}

export class ServerConfigSource {
  private stopping: Promise<void> | undefined;
  private readonly informer: Informer<V1ConfigMap>;
  private readonly listeners = new Set<ServerConfigListener>();
  private readonly log: Logger;
  private config: ServerConfig;
  private reportedProblems = '';

  constructor(
    client: KubeClient,
    private readonly opts: ServerConfigSourceOptions,
  ) {
    this.log = opts.logger.child({ configMap: `${TUNNEL_NAMESPACE}/${SERVER_CONFIGMAP}` });
    this.config = defaultServerConfig(opts);
    this.informer = new Informer<V1ConfigMap>({
      name: `${TUNNEL_NAMESPACE}/configmaps/${SERVER_CONFIGMAP}`,
      list: (o) => client.core.listNamespacedConfigMap({ namespace: TUNNEL_NAMESPACE, ...o }),
      watchPath: `/api/v1/namespaces/${TUNNEL_NAMESPACE}/configmaps`,
      fieldSelector: `metadata.name=${SERVER_CONFIGMAP}`,
      watch: client.watch,
      logger: opts.logger,
    });
    this.informer.addHandler({
      add: (cm) => this.apply(cm.data ?? {}, 'added'),
      update: (_old, cm) => this.apply(cm.data ?? {}, 'updated'),
      // eslint-disable-next-line prefer-spread -- our apply(), not Function.prototype.apply
      delete: () => this.apply(undefined, 'deleted'),
    });
  }

  start(): void {
    this.informer.start();
  }

  /** Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.listeners.clear();
    await this.informer.stop();
  }

  /** True once the ConfigMap (or its absence) has been read. */
  synced(): boolean {
    return this.informer.synced();
  }

  waitForSync(): Promise<void> {
    return this.informer.waitForSync();
  }

  /** The configuration now: the defaults until the ConfigMap is read, and after it is deleted. */
  current(): ServerConfig {
    return this.config;
  }

  /** Calls `fn` after each change; returns the unsubscribe. */
  subscribe(fn: ServerConfigListener): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private apply(data: Record<string, string> | undefined, event: 'added' | 'updated' | 'deleted'): void {
    const { config, problems } = parseServerConfig(data, this.opts);
    const reported = problems.join('\n');
    if (reported !== this.reportedProblems) {
      this.reportedProblems = reported;
      for (const problem of problems) this.log.warn('server ConfigMap entry skipped', { problem });
    }
    const before = this.config;
    if (sameServerConfig(before, config)) return;
    this.config = config;
    this.log.info(event === 'deleted' ? 'server ConfigMap deleted: back to the defaults' : `server ConfigMap ${event}`, {
      config: describeServerConfig(config),
    });
    for (const fn of this.listeners) {
      try {
        fn(config, before);
      } catch (err: unknown) {
        this.log.error('a server ConfigMap subscriber failed', { error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
      }
    }
  }
}
