// Lease-based leader election (coordination.k8s.io/v1), as client-go's:
// whoever holds an unexpired Lease leads; the leader renews it every retry
// period and steps down when it could not renew within the renew deadline;
// others take it over once it has not changed for a whole lease duration, as
// measured on their own clock (so clock skew between replicas does not matter).

import { V1MicroTime, type ConfigurationOptions, type V1Lease } from '@kubernetes/client-node';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from './client.js';
import { apiErrorMessage, isConflict, isNotFound } from './errors.js';
import { abortable, requestDeadline } from './request-options.js';

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  /** This candidate's identity, unique among replicas (hostname_uuid, as OpenYurt). */
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  onStartedLeading(): void;
  onStoppedLeading(): void;
  logger: Logger;
}

const DEFAULTS = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 };

export class LeaderElector {
  private stopping: Promise<void> | undefined;
  private readonly leaseDurationMs: number;
  private readonly renewDeadlineMs: number;
  private readonly retryPeriodMs: number;
  /** How long one API call may take: half the renew deadline, as client-go's leader-election clients. */
  private readonly requestTimeoutMs: number;
  private readonly log: Logger;
  private leading = false;
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private inFlight: Promise<void> | undefined;
  /** The lease as last read or written, and when (our clock) its holder or renew time last changed. */
  private observed: { lease: V1Lease; at: number } | undefined;
  private lastRenewed = 0;
  /** Ends the requests in flight when stop() is called. */
  private readonly stopRequests = new AbortController();

  constructor(
    private readonly client: KubeClient,
    private readonly opts: LeaderElectionOptions,
  ) {
    this.leaseDurationMs = opts.leaseDurationMs ?? DEFAULTS.leaseDurationMs;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? DEFAULTS.renewDeadlineMs;
    this.retryPeriodMs = opts.retryPeriodMs ?? DEFAULTS.retryPeriodMs;
    if (!(this.leaseDurationMs > this.renewDeadlineMs && this.renewDeadlineMs > this.retryPeriodMs && this.retryPeriodMs > 0)) {
      throw new TypeError('leader election needs leaseDuration > renewDeadline > retryPeriod > 0');
    }
    this.requestTimeoutMs = this.renewDeadlineMs / 2;
    this.log = opts.logger.child({ lease: `${opts.namespace}/${opts.name}`, identity: opts.identity });
  }

  isLeader(): boolean {
    return this.leading;
  }

  start(): void {
    if (this.stopped || this.timer !== undefined || this.inFlight !== undefined) return;
    this.tick();
  }

  /** Stops trying; a leader releases the lease so another replica takes over at once. Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    // An attempt cut short may still have been applied by the API server: we may hold the lease without knowing it.
    const cutShort = this.inFlight !== undefined;
    this.stopRequests.abort();
    await this.inFlight;
    if (this.leading || cutShort) await this.release();
    this.stepDown('stopped');
  }

  private tick(): void {
    this.timer = undefined;
    this.inFlight = this.attempt().finally(() => {
      this.inFlight = undefined;
      if (this.stopped) return;
      this.timer = setTimeout(() => this.tick(), this.retryPeriodMs);
      this.timer.unref();
    });
  }

  private async attempt(): Promise<void> {
    let acquired = false;
    // An API server that stops answering must not hold an attempt open: the leader would never notice it cannot renew.
    const deadline = requestDeadline(this.stopRequests.signal, this.requestTimeoutMs);
    try {
      acquired = await this.tryAcquireOrRenew(abortable(deadline.signal));
    } catch (err: unknown) {
      this.log.verbose(2, 'leader election attempt failed', { error: apiErrorMessage(err) });
    } finally {
      deadline.dispose();
    }
    if (this.stopped) return;
    const now = Date.now();
    if (acquired) {
      this.lastRenewed = now;
      if (!this.leading) {
        this.leading = true;
        this.log.info('became leader');
        this.opts.onStartedLeading();
      }
    } else if (this.leading && now - this.lastRenewed > this.renewDeadlineMs) {
      this.stepDown('could not renew the lease within the renew deadline');
    }
  }

  private stepDown(reason: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.log.info('stopped leading', { reason });
    this.opts.onStoppedLeading();
  }

  private async tryAcquireOrRenew(options: ConfigurationOptions): Promise<boolean> {
    const { namespace, name, identity } = this.opts;
    const api = this.client.coordination;
    const now = new V1MicroTime();
    let lease: V1Lease;
    try {
      lease = await api.readNamespacedLease({ namespace, name }, options);
    } catch (err: unknown) {
      if (!isNotFound(err)) throw err;
      const created = await api.createNamespacedLease(
        {
          namespace,
          body: {
            metadata: { namespace, name },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds: Math.ceil(this.leaseDurationMs / 1000),
              acquireTime: now,
              renewTime: now,
              leaseTransitions: 0,
            },
          },
        },
        options,
      );
      this.observe(created);
      return true;
    }
    this.observe(lease);
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const ours = holder === identity;
    if (!ours && holder !== '' && Date.now() < this.observed!.at + this.leaseDurationMs) return false;
    const body: V1Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: identity,
        leaseDurationSeconds: Math.ceil(this.leaseDurationMs / 1000),
        renewTime: now,
        acquireTime: ours ? spec.acquireTime : now,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (ours ? 0 : 1),
      },
    };
    try {
      this.observe(await api.replaceNamespacedLease({ namespace, name, body }, options));
      return true;
    } catch (err: unknown) {
      if (isConflict(err)) return false; // Someone else wrote it first; read again next period.
      throw err;
    }
  }

  private observe(lease: V1Lease): void {
    const prev = this.observed?.lease.spec;
    const next = lease.spec;
    const changed = prev === undefined || prev.holderIdentity !== next?.holderIdentity || String(prev.renewTime) !== String(next?.renewTime);
    this.observed = { lease, at: changed ? Date.now() : this.observed!.at };
  }

  /**
   * Gives the lease up so the next candidate need not wait for it to expire.
   * It reads the lease first: the copy we last saw may be older than what the
   * API server holds (a renewal cut short by stop() may have been applied),
   * and a write on an old copy is refused as a conflict. Once more on a
   * conflict (a renewal of ours landing between the read and the write).
   */
  private async release(): Promise<void> {
    const { namespace, name, identity } = this.opts;
    const api = this.client.coordination;
    const deadline = requestDeadline(undefined, this.requestTimeoutMs);
    const options = abortable(deadline.signal);
    try {
      for (let tries = 1; ; tries++) {
        const lease = await api.readNamespacedLease({ namespace, name }, options);
        if (lease.spec?.holderIdentity !== identity) return;
        try {
          await api.replaceNamespacedLease(
            { namespace, name, body: { ...lease, spec: { ...lease.spec, holderIdentity: '', leaseDurationSeconds: 1, renewTime: new V1MicroTime() } } },
            options,
          );
          return;
        } catch (err: unknown) {
          if (!isConflict(err) || tries >= 2) throw err;
        }
      }
    } catch (err: unknown) {
      if (isNotFound(err)) return;
      this.log.warn('could not release the lease; the next leader waits for it to expire', { error: apiErrorMessage(err) });
    } finally {
      deadline.dispose();
    }
  }
}
