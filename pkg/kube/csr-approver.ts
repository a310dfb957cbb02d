// Approves the tunnel's CertificateSigningRequests when their requester is who
// the certificate names (csr-review.ts), so that no one runs `kubectl
// certificate approve` by hand and no node gets another's certificate. Shaped
// like Kubernetes' certificate controllers: CSR events only enqueue a name; the
// worker reads the CSR from the store and, if it is ours and still pending,
// approves it through the /approval subresource or leaves it pending with one
// rate-limited log line (logged again only when the reason changes). Every
// replica watches; only the holder of the Lease kube-system/tunnel-csr-approver
// decides, and its writes in flight are aborted when it loses the lease.

import { randomUUID } from 'node:crypto';
import { addAbortListener } from 'node:events';
import { hostname } from 'node:os';
import type { V1CertificateSigningRequest, V1Node } from '@kubernetes/client-node';
import { KUBELET_SERVING_SIGNER } from '../certs/certificate-manager.js';
import type { Logger } from '../log/logger.js';
import { LogLimiter, type LogLimiterOptions } from '../log/log-limiter.js';
import type { KubeClient } from './client.js';
import { reviewTunnelCsr, isDecided, type AllowedNames } from './csr-review.js';
import { isNotFound } from './errors.js';
import { Informer } from './informer.js';
import { LeaderWork, type LeaseTimings } from './leader-work.js';
import { abortable, requestDeadline } from './request-options.js';
import { TUNNEL_NAMESPACE } from './tunnel-addresses.js';
import { WorkQueue } from './work-queue.js';

export const CSR_APPROVER_LEASE = 'tunnel-csr-approver';
export const APPROVED_REASON = 'YurtTunnelRequesterVerified';
/** The server's ServiceAccount in the manifests. */
export const DEFAULT_SERVER_SERVICE_ACCOUNT = 'yurt-tunnel-server';
const SYNC_TIMEOUT_MS = 15_000;

export interface CsrApproverOptions {
  client: KubeClient;
  /** The server's ServiceAccount (in kube-system): the only requester of the server's certificates. */
  serverServiceAccount: string;
  /**
   * The names the server's serving certificate may carry: what this server's own
   * template would name now (cluster.ts), once its informers hold them. Waited
   * for no longer than one sync's deadline. Call recheck() when they change.
   */
  servingNames(): Promise<AllowedNames>;
  /** This replica in the Lease; default `<hostname>_<uuid>`. */
  identity?: string;
  lease?: LeaseTimings;
  /** How long one CSR's review may take, its API calls included (default 15 s). */
  syncTimeoutMs?: number;
  /** How many "left pending" lines per interval (default 5 per 10 s; the rest are counted in a summary). */
  logLimit?: LogLimiterOptions;
  logger: Logger;
}

interface Leading {
  queue: WorkQueue;
  abort: AbortController;
}

export class CsrApprover {
  readonly identity: string;
  readonly serverUser: string;
  private readonly log: Logger;
  private readonly limited: LogLimiter;
  private readonly csrs: Informer<V1CertificateSigningRequest>;
  private readonly work: LeaderWork;
  private leading: Leading | undefined;
  /** Why each CSR left pending was left pending, as last logged. */
  private readonly refused = new Map<string, string>();
  private stopping: Promise<void> | undefined;

  constructor(private readonly opts: CsrApproverOptions) {
    this.identity = opts.identity ?? `${hostname()}_${randomUUID()}`;
    this.serverUser = `system:serviceaccount:${TUNNEL_NAMESPACE}:${opts.serverServiceAccount}`;
    this.log = opts.logger.child({ component: 'csr-approver' });
    this.limited = new LogLimiter(this.log, opts.logLimit);
    const { client } = opts;
    this.csrs = new Informer<V1CertificateSigningRequest>({
      name: 'certificatesigningrequests',
      list: (o) => client.certificates.listCertificateSigningRequest(o),
      watchPath: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
      watch: client.watch,
      logger: this.log,
    });
    const enqueue = (csr: V1CertificateSigningRequest): void => {
      if (!isDecided(csr)) this.leading?.queue.add(csr.metadata?.name ?? '');
      else this.refused.delete(csr.metadata?.name ?? '');
    };
    this.csrs.addHandler({ add: enqueue, update: (_old, csr) => enqueue(csr), delete: (csr) => this.refused.delete(csr.metadata?.name ?? '') });
    this.work = new LeaderWork(client, {
      lease: CSR_APPROVER_LEASE,
      identity: this.identity,
      ...(opts.lease !== undefined ? { timings: opts.lease } : {}),
      lead: () => this.lead(),
      unlead: () => this.unlead(),
      what: 'CSR approver',
      logger: this.log,
    });
  }

  start(): void {
    this.log.info('CSR approver started: approves the tunnel CSRs whose requester is who they name, while it holds the lease', {
      lease: `${TUNNEL_NAMESPACE}/${CSR_APPROVER_LEASE}`,
      identity: this.identity,
      serverServiceAccount: this.serverUser,
    });
    this.csrs.start();
    this.work.start();
  }

  isLeader(): boolean {
    return this.work.isLeader();
  }

  /**
   * Reviews the server's pending serving CSRs again: the serving names changed,
   * so one refused for a name this replica had not seen yet (another replica's
   * informers were ahead) may pass now.
   */
  recheck(): void {
    const leading = this.leading;
    if (leading === undefined) return;
    for (const csr of this.csrs.list()) {
      if (csr.spec.signerName === KUBELET_SERVING_SIGNER && csr.spec.username === this.serverUser && !isDecided(csr)) {
        leading.queue.add(csr.metadata?.name ?? '');
      }
    }
  }

  /** Stops deciding, gives the lease up, ends the watch. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      await this.work.stop();
      await this.csrs.stop();
      this.refused.clear();
      this.limited.flush();
    })();
    return this.stopping;
  }

  private async lead(): Promise<void> {
    if (this.stopping !== undefined || this.leading !== undefined) return;
    const leading: Leading = {
      queue: new WorkQueue({ name: 'csr-approver', sync: (name) => this.sync(name, leading), logger: this.log }),
      abort: new AbortController(),
    };
    this.leading = leading;
    await this.csrs.waitForSync();
    if (this.leading !== leading) return;
    for (const csr of this.csrs.list()) if (!isDecided(csr)) leading.queue.add(csr.metadata?.name ?? '');
  }

  private async unlead(): Promise<void> {
    const leading = this.leading;
    if (leading === undefined) return;
    this.leading = undefined;
    leading.abort.abort();
    await leading.queue.stop();
  }

  private async sync(name: string, leading: Leading): Promise<void> {
    const csr = this.csrs.get(name);
    if (csr === undefined || isDecided(csr) || leading.abort.signal.aborted) return;
    const deadline = requestDeadline(leading.abort.signal, this.opts.syncTimeoutMs ?? SYNC_TIMEOUT_MS);
    try {
      const options = abortable(deadline.signal);
      const readNode = async (node: string): Promise<V1Node | undefined> => {
        try {
          return await this.opts.client.core.readNode({ name: node }, options);
        } catch (err: unknown) {
          if (isNotFound(err)) return undefined;
          throw err;
        }
      };
      const servingNames = (): Promise<AllowedNames> => beforeAbort(this.opts.servingNames(), deadline.signal);
      const review = await reviewTunnelCsr(csr, { serverUser: this.serverUser, readNode, servingNames });
      const fields = { csr: name, requester: csr.spec.username ?? '', signer: csr.spec.signerName };
      if (review.verdict === 'not-ours') {
        this.log.verbose(5, 'CSR not the tunnel’s; left to others', { ...fields, why: review.why });
        return;
      }
      if (review.verdict === 'refuse') {
        if (this.refused.get(name) !== review.reason) this.limited.warn('CSR left pending', { ...fields, reason: review.reason });
        this.refused.set(name, review.reason);
        return;
      }
      const now = new Date();
      const body: V1CertificateSigningRequest = {
        ...csr,
        status: {
          ...csr.status,
          conditions: [
            ...(csr.status?.conditions ?? []),
            { type: 'Approved', status: 'True', reason: APPROVED_REASON, message: review.message, lastUpdateTime: now, lastTransitionTime: now },
          ],
        },
      };
      await this.opts.client.certificates.replaceCertificateSigningRequestApproval({ name, body }, options);
      this.refused.delete(name);
      this.log.info('CSR approved', { ...fields, message: review.message });
    } finally {
      deadline.dispose();
    }
  }
}

/** `work`, or a rejection with the signal's reason once it aborts: a sync never waits past its deadline. */
async function beforeAbort<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  signal.throwIfAborted();
  let listener: Disposable | undefined;
  const aborted = new Promise<never>((_resolve, reject) => {
    listener = addAbortListener(signal, () => reject(signal.reason));
  });
  try {
    return await Promise.race([work, aborted]);
  } finally {
    listener?.[Symbol.dispose]();
  }
}
