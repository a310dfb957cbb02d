// Work done only while this replica holds a Lease (the DNS controller, the
// CSR approver): `lead` runs when the lease is won and `unlead` when it is
// lost, one change at a time and in order, and a change that fails is logged
// without stopping the ones after it. stop() ends the work before it gives
// the lease up, so the next leader never works beside us.

import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import type { KubeClient } from './client.js';
import { LeaderElector } from './leader-election.js';
import { TUNNEL_NAMESPACE } from './tunnel-addresses.js';

/** The lease's timings, for tests (LeaderElector's defaults otherwise). */
export interface LeaseTimings {
  durationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
}

export interface LeaderWorkOptions {
  /** The Lease in kube-system. */
  lease: string;
  identity: string;
  timings?: LeaseTimings;
  lead: () => Promise<void>;
  unlead: () => Promise<void>;
  /** Who works, for the log line of a failed change: `DNS controller`, `CSR approver`. */
  what: string;
  logger: Logger;
}

export class LeaderWork {
  private readonly elector: LeaderElector;
  private transition: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | undefined;

  constructor(
    client: KubeClient,
    private readonly opts: LeaderWorkOptions,
  ) {
    const t = opts.timings;
    this.elector = new LeaderElector(client, {
      namespace: TUNNEL_NAMESPACE,
      name: opts.lease,
      identity: opts.identity,
      ...(t?.durationMs !== undefined ? { leaseDurationMs: t.durationMs } : {}),
      ...(t?.renewDeadlineMs !== undefined ? { renewDeadlineMs: t.renewDeadlineMs } : {}),
      ...(t?.retryPeriodMs !== undefined ? { retryPeriodMs: t.retryPeriodMs } : {}),
      onStartedLeading: () => this.queue('lead'),
      onStoppedLeading: () => this.queue('unlead'),
      logger: opts.logger,
    });
  }

  start(): void {
    this.elector.start();
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  /** Ends the work, then gives the lease up. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.queue('unlead');
      await this.transition;
      await this.elector.stop();
      // Losing the lease queues one more unlead: it finds nothing to end.
      await this.transition;
    })();
    return this.stopping;
  }

  private queue(change: 'lead' | 'unlead'): void {
    const run = change === 'lead' ? this.opts.lead : this.opts.unlead;
    this.transition = this.transition.then(run).catch((err: unknown) => {
      const doing = change === 'lead' ? 'start its work on winning the lease' : 'stop its work on losing the lease';
      this.opts.logger.error(`${this.opts.what} could not ${doing}`, { error: errorMessage(err) });
    });
  }
}
