// A shared informer, as client-go's: list, then watch from the list's
// resourceVersion; a watch that ends is resumed from the last version seen,
// a 410 Gone lists again, errors back off with jitter. The store answers
// lookups once the first list is in. stop() ends the watch and every timer.

import type { Watch } from '@kubernetes/client-node';
import { Backoff, type BackoffOptions } from '../timers/backoff.js';
import { sleep } from '../timers/sleep.js';
import type { Logger } from '../log/logger.js';
import { apiErrorMessage, HTTP_GONE, isGone, WatchError } from './errors.js';
import { asError } from '../protocol/errors.js';

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  resourceVersion?: string;
}

export interface KubeObject {
  metadata?: ObjectMeta;
}

export interface ListPage<T> {
  items: T[];
  metadata?: { resourceVersion?: string; _continue?: string };
}

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  limit?: number;
  _continue?: string;
}

export interface InformerHandler<T> {
  add?(obj: T): void;
  update?(old: T, obj: T): void;
  delete?(obj: T): void;
}

export interface InformerOptions<T, Raw> {
  /** What is watched, for log lines: `nodes`, `pods`, `kube-system/services`. */
  name: string;
  /** One page of the list (a typed API call). */
  list(opts: ListOptions): Promise<ListPage<Raw>>;
  /** The collection's path, e.g. `/api/v1/nodes`. */
  watchPath: string;
  watch: Watch;
  labelSelector?: string;
  fieldSelector?: string;
  /** Every handler's update is called with each object this often; 0 (default) never. */
  resyncMs?: number;
  pageSize?: number;
  /** What the store keeps of each object (e.g. only the fields a lookup needs); default the whole object. */
  transform?: (raw: Raw) => T;
  backoff?: BackoffOptions;
  logger: Logger;
}

const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 800, factor: 2, jitter: 1, capMs: 30_000 };
/** Watches are asked to end after 5–10 minutes, as client-go's reflector does, so a silently dead one is replaced. */
const WATCH_TIMEOUT_MIN_S = 300;

export function objectKey(obj: KubeObject): string {
  const meta = obj.metadata ?? {};
  return meta.namespace !== undefined && meta.namespace !== '' ? `${meta.namespace}/${meta.name ?? ''}` : (meta.name ?? '');
}

export class Informer<T extends KubeObject, Raw extends KubeObject = T> {
  private stopDone: Promise<void> | undefined;
  private readonly store = new Map<string, T>();
  private readonly handlers: InformerHandler<T>[] = [];
  private readonly backoff: Backoff;
  private readonly log: Logger;
  private resourceVersion: string | undefined;
  private hasSynced = false;
  private syncWaiters: (() => void)[] = [];
  private stopped = false;
  private running: Promise<void> | undefined;
  private abortWatch: (() => void) | undefined;
  /** Aborted by stop(): ends a pause between retries at once. */
  private readonly stopping = new AbortController();
  private resyncTimer: NodeJS.Timeout | undefined;

  private readonly transform: (raw: Raw) => T;

  constructor(private readonly opts: InformerOptions<T, Raw>) {
    this.transform = opts.transform ?? ((raw) => raw as unknown as T);
    this.backoff = new Backoff(opts.backoff ?? DEFAULT_BACKOFF);
    this.log = opts.logger.child({ informer: opts.name });
  }

  /** Adds `handler`; returns what removes it. */
  addHandler(handler: InformerHandler<T>): () => void {
    this.handlers.push(handler);
    return () => {
      const i = this.handlers.indexOf(handler);
      if (i >= 0) this.handlers.splice(i, 1);
    };
  }

  start(): void {
    if (this.running !== undefined || this.stopped) return;
    this.running = this.run();
    if ((this.opts.resyncMs ?? 0) > 0) {
      this.resyncTimer = setInterval(() => this.resync(), this.opts.resyncMs);
      this.resyncTimer.unref();
    }
  }

  /** True once the first list is in the store. */
  synced(): boolean {
    return this.hasSynced;
  }

  /** Resolves when the first list is in the store (or at once if it is). */
  waitForSync(): Promise<void> {
    if (this.hasSynced) return Promise.resolve();
    return new Promise((resolve) => this.syncWaiters.push(resolve));
  }

  /** An object by `namespace/name` (or `name` for cluster-scoped kinds). */
  get(key: string): T | undefined {
    return this.store.get(key);
  }

  list(): T[] {
    return [...this.store.values()];
  }

  /** Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopDone ??= this.doStop();
    return this.stopDone;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.resyncTimer);
    this.abortWatch?.();
    this.stopping.abort();
    await this.running;
    // Whoever waits for a sync that will never come is released; synced() stays false.
    for (const wake of this.syncWaiters.splice(0)) wake();
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      try {
        if (this.resourceVersion === undefined) await this.relist();
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run during the await
        if (this.stopped) return;
        const sawEvents = await this.watchOnce();
        if (sawEvents) failures = 0;
      } catch (err: unknown) {
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run during the await
        if (this.stopped) return;
        if (isGone(err)) {
          this.log.verbose(2, 'watch expired (410 Gone): listing again', { resourceVersion: this.resourceVersion });
          this.resourceVersion = undefined;
          continue;
        }
        failures++;
        if (failures === 1) this.backoff.reset();
        const delay = this.backoff.next();
        // The first failure is a warning; repeats every tenth, so a long outage does not flood the log.
        if (failures === 1 || failures % 10 === 0) {
          this.log.warn('cannot list/watch from the API server; retrying', {
            path: this.opts.watchPath,
            error: apiErrorMessage(err),
            failures,
            retryInMs: Math.round(delay),
          });
        }
        await sleep(delay, this.stopping.signal);
      }
    }
  }

  private async relist(): Promise<void> {
    const items: T[] = [];
    let resourceVersion: string | undefined;
    let next: string | undefined;
    do {
      const page = await this.opts.list({
        labelSelector: this.opts.labelSelector,
        fieldSelector: this.opts.fieldSelector,
        limit: this.opts.pageSize ?? 500,
        _continue: next,
      });
      for (const raw of page.items) items.push(this.transform(raw));
      resourceVersion = page.metadata?.resourceVersion;
      next = page.metadata?._continue || undefined;
    } while (next !== undefined && !this.stopped);
    if (this.stopped) return;
    this.replace(items);
    this.resourceVersion = resourceVersion ?? '0';
    if (!this.hasSynced) {
      this.hasSynced = true;
      this.log.verbose(2, 'synced', { objects: this.store.size, resourceVersion });
      for (const wake of this.syncWaiters.splice(0)) wake();
    }
  }

  /** Watches from the current version until the watch ends; true if any event came. */
  private watchOnce(): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      let sawEvents = false;
      let settled = false;
      const finish = (err: unknown): void => {
        if (settled) return;
        settled = true;
        this.abortWatch = undefined;
        if (err === null || err === undefined || this.stopped) resolve(sawEvents);
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- the watch's own error, passed on as it came
        else reject(err);
      };
      const query = {
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: true,
        labelSelector: this.opts.labelSelector,
        fieldSelector: this.opts.fieldSelector,
        timeoutSeconds: WATCH_TIMEOUT_MIN_S + Math.floor(Math.random() * WATCH_TIMEOUT_MIN_S),
      };
      let controller: AbortController | undefined;
      this.abortWatch = () => {
        controller?.abort();
        finish(null);
      };
      const onEvent = (type: string, obj: unknown): void => {
        if (settled) return;
        sawEvents = true;
        if (type === 'ERROR') {
          const status = obj as { code?: number; message?: string };
          // Settle first: aborting reports an abort error through the watch's done callback.
          finish(
            status.code === HTTP_GONE
              ? new WatchError('YT_ERR_WATCH_EXPIRED', status.code, status.message ?? 'too old resource version')
              : new WatchError('YT_ERR_WATCH_FAILED', status.code, status.message ?? 'watch error'),
          );
          controller?.abort();
          return;
        }
        this.apply(type, obj as Raw);
      };
      this.opts.watch.watch(this.opts.watchPath, query, onEvent, finish).then((c) => {
        controller = c;
        if (settled || this.stopped) c.abort();
      }, finish);
    });
  }

  private apply(type: string, raw: Raw): void {
    const rv = raw.metadata?.resourceVersion;
    if (type === 'BOOKMARK') {
      if (rv !== undefined) this.resourceVersion = rv;
      return;
    }
    const obj = this.transform(raw);
    const key = objectKey(obj);
    const old = this.store.get(key);
    switch (type) {
      case 'ADDED':
      case 'MODIFIED':
        this.store.set(key, obj);
        if (old === undefined) this.emit((h) => h.add?.(obj));
        else this.emit((h) => h.update?.(old, obj));
        break;
      case 'DELETED':
        this.store.delete(key);
        this.emit((h) => h.delete?.(old ?? obj));
        break;
      default:
        this.log.verbose(2, 'ignoring a watch event of unknown type', { type });
        return;
    }
    if (rv !== undefined) this.resourceVersion = rv;
  }

  /** Replaces the store with a fresh list, telling handlers what changed. */
  private replace(items: T[]): void {
    const fresh = new Map(items.map((obj) => [objectKey(obj), obj]));
    for (const [key, old] of this.store) {
      if (!fresh.has(key)) {
        this.store.delete(key);
        this.emit((h) => h.delete?.(old));
      }
    }
    for (const [key, obj] of fresh) {
      const old = this.store.get(key);
      this.store.set(key, obj);
      if (old === undefined) this.emit((h) => h.add?.(obj));
      else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion) this.emit((h) => h.update?.(old, obj));
    }
  }

  private resync(): void {
    for (const obj of this.store.values()) this.emit((h) => h.update?.(obj, obj));
  }

  private emit(call: (h: InformerHandler<T>) => void): void {
    for (const handler of this.handlers) {
      try {
        call(handler);
      } catch (err: unknown) {
        this.log.error('informer event handler failed', { error: asError(err).stack ?? String(err) });
      }
    }
  }
}

/** What a controller needs of an informer another component runs: its store, its events, its first sync. */
export interface SharedInformer<T> {
  addHandler(handler: InformerHandler<T>): void;
  get(key: string): T | undefined;
  list(): T[];
  synced(): boolean;
  waitForSync(): Promise<void>;
}
