// The server's side of Konnectivity's lease-based server count
// (--enable-lease-controller, ../shared/spec/anp.md §11): one Lease
// `konnectivity-proxy-server-<serverID>` held by this server, renewed as
// client-go's node-lease controller renews (renewTime, and the labels set
// again each time), so that agents counting valid Leases — upstream Go agents
// with --count-server-leases, and ours — know how many servers there are.
// Every GC interval, Leases with our labels that are no longer valid (servers
// that died without deleting theirs) are deleted. stop() deletes our own.

import { V1MicroTime, type V1Lease } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { apiErrorMessage, isConflict, isNotFound } from './errors.js';
import { abortable, requestDeadline } from './request-options.js';
import { retryOnConflict } from './retry.js';
import {
  DEFAULT_LEASE_DURATION_MS,
  DEFAULT_LEASE_GC_INTERVAL_MS,
  DEFAULT_LEASE_RENEW_INTERVAL_MS,
  isLeaseValid,
  labelSelectorOf,
  serverLeaseName,
} from './server-lease-names.js';

export interface ServerLeaseOptions {
  client: KubeClient;
  serverID: string;
  namespace: string;
  labels: Record<string, string>;
  /** leaseDurationSeconds, rounded up to whole seconds. Default 30 s. */
  leaseDurationMs?: number;
  /** Default 15 s. */
  renewIntervalMs?: number;
  /** Default 15 s. */
  gcIntervalMs?: number;
  logger: Logger;
}

export class ServerLease {
  readonly name: string;
  private readonly durationSeconds: number;
  private readonly renewIntervalMs: number;
  private readonly gcIntervalMs: number;
  /** How long one API call may take: the renew interval, so a hung call never skips a renewal unnoticed. */
  private readonly requestTimeoutMs: number;
  private readonly log: Logger;
  private renewTimer: NodeJS.Timeout | undefined;
  private gcTimer: NodeJS.Timeout | undefined;
  private renewing: Promise<void> | undefined;
  private collecting: Promise<void> | undefined;
  private readonly stopRequests = new AbortController();
  private stopped = false;
  private stopping: Promise<void> | undefined;
  /** The last renewal failed (logged once until one succeeds). */
  private failing = false;

  constructor(private readonly opts: ServerLeaseOptions) {
    this.name = serverLeaseName(opts.serverID);
    const durationMs = opts.leaseDurationMs ?? DEFAULT_LEASE_DURATION_MS;
    this.renewIntervalMs = opts.renewIntervalMs ?? DEFAULT_LEASE_RENEW_INTERVAL_MS;
    this.gcIntervalMs = opts.gcIntervalMs ?? DEFAULT_LEASE_GC_INTERVAL_MS;
    if (!(durationMs > this.renewIntervalMs && this.renewIntervalMs > 0 && this.gcIntervalMs > 0)) {
      throw new TypeError(
        `the server lease needs a duration longer than its renew interval (got duration ${durationMs} ms, renew interval ${this.renewIntervalMs} ms, GC interval ${this.gcIntervalMs} ms)`,
      );
    }
    this.durationSeconds = Math.ceil(durationMs / 1000);
    this.requestTimeoutMs = this.renewIntervalMs;
    this.log = opts.logger.child({ lease: `${opts.namespace}/${this.name}` });
  }

  start(): void {
    if (this.stopped || this.renewTimer !== undefined || this.renewing !== undefined) return;
    this.log.info('server lease controller started', { labels: labelSelectorOf(this.opts.labels), leaseDurationSeconds: this.durationSeconds });
    this.renewTick();
    this.gcTimer = setTimeout(() => this.gcTick(), this.gcIntervalMs);
    this.gcTimer.unref();
  }

  /** Stops renewing and deletes our Lease, so agents count one server fewer at once. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.gcTimer);
    this.stopRequests.abort();
    await Promise.all([this.renewing, this.collecting]);
    await this.call(async (options) => {
      try {
        await this.opts.client.coordination.deleteNamespacedLease({ namespace: this.opts.namespace, name: this.name }, options);
        this.log.info('deleted the server lease');
      } catch (err: unknown) {
        if (!isNotFound(err)) this.log.warn('could not delete the server lease; it expires by itself', { error: apiErrorMessage(err) });
      }
    }, undefined);
  }

  /** One API exchange with its own deadline, aborted by stop() when `parent` is given. */
  private async call(fn: (options: ReturnType<typeof abortable>) => Promise<void>, parent: AbortSignal | undefined): Promise<void> {
    const deadline = requestDeadline(parent, this.requestTimeoutMs);
    try {
      await fn(abortable(deadline.signal));
    } finally {
      deadline.dispose();
    }
  }

  private renewTick(): void {
    this.renewTimer = undefined;
    this.renewing = this.call((options) => this.renew(options), this.stopRequests.signal)
      .then(
        () => {
          if (this.failing) this.log.info('server lease renewed again');
          this.failing = false;
        },
        (err: unknown) => {
          if (this.stopped || this.failing) return;
          this.failing = true;
          this.log.warn('could not renew the server lease; retrying every renew interval', { error: apiErrorMessage(err) });
        },
      )
      .finally(() => {
        this.renewing = undefined;
        if (this.stopped) return;
        this.renewTimer = setTimeout(() => this.renewTick(), this.renewIntervalMs);
        this.renewTimer.unref();
      });
  }

  /** Creates our Lease, or renews it: holder, duration, renewTime and labels, as client-go's node-lease controller. */
  private async renew(options: ReturnType<typeof abortable>): Promise<void> {
    const { client, namespace, serverID, labels } = this.opts;
    const api = client.coordination;
    await retryOnConflict(async () => {
      let lease: V1Lease;
      try {
        lease = await api.readNamespacedLease({ namespace, name: this.name }, options);
      } catch (err: unknown) {
        if (!isNotFound(err)) throw err;
        const body: V1Lease = {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name: this.name, namespace, labels: { ...labels } },
          spec: { holderIdentity: serverID, leaseDurationSeconds: this.durationSeconds, renewTime: new V1MicroTime() },
        };
        await api.createNamespacedLease({ namespace, body }, options);
        this.log.verbose(2, 'created the server lease');
        return;
      }
      const body: V1Lease = {
        ...lease,
        metadata: { ...lease.metadata, labels: { ...lease.metadata?.labels, ...labels } },
        spec: { ...lease.spec, holderIdentity: serverID, leaseDurationSeconds: this.durationSeconds, renewTime: new V1MicroTime() },
      };
      await api.replaceNamespacedLease({ namespace, name: this.name, body }, options);
      this.log.verbose(5, 'renewed the server lease');
    });
  }

  private gcTick(): void {
    this.gcTimer = undefined;
    this.collecting = this.call((options) => this.collect(options), this.stopRequests.signal)
      .catch((err: unknown) => {
        if (!this.stopped) this.log.verbose(2, 'server lease garbage collection failed; next try in one interval', { error: apiErrorMessage(err) });
      })
      .finally(() => {
        this.collecting = undefined;
        if (this.stopped) return;
        this.gcTimer = setTimeout(() => this.gcTick(), this.gcIntervalMs);
        this.gcTimer.unref();
      });
  }

  /**
   * Deletes the expired Leases with our labels. Each delete is conditional on
   * the version we judged expired: a server that renewed meanwhile keeps it.
   */
  private async collect(options: ReturnType<typeof abortable>): Promise<void> {
    const { client, namespace, labels } = this.opts;
    const list = await client.coordination.listNamespacedLease({ namespace, labelSelector: labelSelectorOf(labels) }, options);
    const now = Date.now();
    for (const lease of list.items) {
      const name = lease.metadata?.name;
      if (name === undefined || isLeaseValid(lease.spec, now)) continue;
      try {
        await client.coordination.deleteNamespacedLease(
          { namespace, name, body: { preconditions: { resourceVersion: lease.metadata?.resourceVersion } } },
          options,
        );
        this.log.info('deleted an expired server lease', { expired: name, holder: lease.spec?.holderIdentity });
      } catch (err: unknown) {
        if (isNotFound(err) || isConflict(err)) continue; // Gone already, or renewed since.
        throw err;
      }
    }
  }
}
