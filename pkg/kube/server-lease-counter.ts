// The agent's side of Konnectivity's lease-based server count
// (--count-server-leases, ../shared/spec/anp.md §11): an informer on the
// server Leases matching --lease-label-selector in --lease-namespace; the
// count is the number of them valid now, judged at each call, so a Lease
// that stops being renewed (a server killed) drops out without any event.

import type { V1Lease } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { Informer } from './informer.js';
import { isLeaseValid, type LeaseTimes } from './server-lease-names.js';

export interface ServerLeaseCounterOptions {
  client: KubeClient;
  namespace: string;
  labelSelector: string;
  logger: Logger;
}

/** What the store keeps of a Lease: its name and the times its validity needs. */
interface LeaseEntry {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string };
  spec: LeaseTimes;
}

export class ServerLeaseCounter {
  private readonly informer: Informer<LeaseEntry, V1Lease>;

  constructor(opts: ServerLeaseCounterOptions) {
    const { client, namespace, labelSelector } = opts;
    this.informer = new Informer<LeaseEntry, V1Lease>({
      name: `${namespace}/leases`,
      list: (o) => client.coordination.listNamespacedLease({ namespace, ...o }),
      watchPath: `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases`,
      labelSelector,
      watch: client.watch,
      transform: (lease) => ({
        metadata: { name: lease.metadata?.name, namespace: lease.metadata?.namespace, resourceVersion: lease.metadata?.resourceVersion },
        spec: { renewTime: lease.spec?.renewTime, acquireTime: lease.spec?.acquireTime, leaseDurationSeconds: lease.spec?.leaseDurationSeconds },
      }),
      logger: opts.logger,
    });
  }

  start(): void {
    this.informer.start();
  }

  /** Valid server Leases now; 0 until the first list is in (the caller then falls back to the servers' own count). */
  count(now = Date.now()): number {
    return this.informer.list().filter((l) => isLeaseValid(l.spec, now)).length;
  }

  stop(): Promise<void> {
    return this.informer.stop();
  }
}
