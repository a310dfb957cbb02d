// Keeps one certificate valid: loads it from its store, asks its source (the
// cluster's CSR API) for a new one when there is none, when the stored one is
// unusable, when the wanted names changed, and at 70–90 % of its lifetime
// (jittered, so replicas do not all renew at once). Whoever serves or dials
// with it subscribes to onRotated and swaps it in without a restart.

import { Backoff, type BackoffOptions } from '../timers/backoff.js';
import { sleep } from '../timers/sleep.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import type { PemFileStore } from './pem-file-store.js';
import type { CertKeyPair } from './pki.js';
import { describeCertificate, sameAddressSet, type CertificateSummary } from './read-certificate.js';

export type KeyUsage = 'digital signature' | 'key encipherment' | 'server auth' | 'client auth';

/** The cluster signers our certificates ask for (spec/yurttunnel.md §4.3). */
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
export const KUBE_APISERVER_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client';
export const SERVING_USAGES: KeyUsage[] = ['digital signature', 'key encipherment', 'server auth'];
export const CLIENT_USAGES: KeyUsage[] = ['digital signature', 'key encipherment', 'client auth'];

export interface CertificateTemplate {
  commonName: string;
  organizations: string[];
  dnsNames: string[];
  ips: string[];
  signerName: string;
  usages: KeyUsage[];
}

/** Where new certificates come from (pkg/kube's CsrSigner). */
export interface CertificateSource {
  readonly description: string;
  sign(req: { namePrefix: string; csr: string; signerName: string; usages: KeyUsage[]; expirationSeconds?: number }, signal?: AbortSignal): Promise<string>;
}

export interface CertificateManagerOptions {
  /** What the certificate is for, in log lines and the CSR's name: `yurttunnel-server`. */
  name: string;
  store: PemFileStore;
  source: CertificateSource;
  /** The certificate wanted now; asked again on every check. */
  template(): CertificateTemplate;
  expirationSeconds?: number;
  backoff?: BackoffOptions;
  random?: () => number;
  logger: Logger;
}

const MAX_TIMER_MS = 2 ** 31 - 1;
const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 1000, factor: 2, jitter: 0.5, capMs: 5 * 60_000 };

/** When to renew: a random point between 70 % and 90 % of the lifetime. */
export function rotationDeadline(notBefore: Date, notAfter: Date, random: () => number = Math.random): Date {
  const lifetime = notAfter.getTime() - notBefore.getTime();
  return new Date(notBefore.getTime() + lifetime * (0.7 + 0.2 * random()));
}

/** Why `have` is not the certificate `want` describes, or undefined if it is. */
export function templateMismatch(have: CertificateSummary, want: CertificateTemplate): string | undefined {
  if (have.commonName !== want.commonName) return `common name ${have.commonName}, want ${want.commonName}`;
  const sameSet = (a: readonly string[], b: readonly string[]): boolean => a.length === b.length && a.every((x) => b.includes(x));
  if (!sameSet([...new Set(have.organizations)], [...new Set(want.organizations)])) {
    return `organizations ${have.organizations.join(',')}, want ${want.organizations.join(',')}`;
  }
  if (!sameSet([...new Set(have.dnsNames)], [...new Set(want.dnsNames)])) return `DNS names ${have.dnsNames.join(',')}, want ${want.dnsNames.join(',')}`;
  if (!sameAddressSet(have.ips, want.ips)) return `IP addresses ${have.ips.join(',')}, want ${want.ips.join(',')}`;
  return undefined;
}

export class CertificateManager {
  private stopping: Promise<void> | undefined;
  private pair: CertKeyPair | undefined;
  private summary: CertificateSummary | undefined;
  private deadline: Date | undefined;
  private readonly listeners: ((pair: CertKeyPair) => void)[] = [];
  private readyWaiters: { resolve: (p: CertKeyPair) => void; reject: (e: Error) => void }[] = [];
  private readonly backoff: Backoff;
  private readonly random: () => number;
  private readonly log: Logger;
  private timer: NodeJS.Timeout | undefined;
  private writeTimer: NodeJS.Timeout | undefined;
  private readonly writeBackoff: Backoff;
  private obtaining: Promise<void> | undefined;
  private recheck = false;
  private readonly abort = new AbortController();
  private stopped = false;

  constructor(private readonly opts: CertificateManagerOptions) {
    this.backoff = new Backoff(opts.backoff ?? DEFAULT_BACKOFF);
    this.writeBackoff = new Backoff(opts.backoff ?? DEFAULT_BACKOFF);
    this.random = opts.random ?? Math.random;
    this.log = opts.logger.child({ certificate: opts.name });
  }

  current(): CertKeyPair | undefined {
    return this.pair;
  }

  /** When the current certificate will be renewed. */
  rotationDeadline(): Date | undefined {
    return this.deadline;
  }

  onRotated(listener: (pair: CertKeyPair) => void): void {
    this.listeners.push(listener);
  }

  /** Loads the stored certificate; starts obtaining a new one in the background when it is not usable. Never throws. */
  async start(): Promise<void> {
    const stored = await this.opts.store.load();
    if (stored.kind === 'unusable') {
      this.log.warn('the stored certificate is unusable; requesting a new one', { path: stored.path, problem: stored.problem });
    } else if (stored.kind === 'found') {
      const summary = describeCertificate(stored.pair.cert);
      this.install(stored.pair, summary);
      this.log.info('loaded the stored certificate', { path: stored.path, notAfter: summary.notAfter.toISOString() });
    } else {
      this.log.info('no stored certificate; requesting one', { path: stored.path, from: this.opts.source.description });
    }
    this.check('start');
  }

  /** Resolves with a certificate as soon as there is one. */
  ready(): Promise<CertKeyPair> {
    if (this.pair !== undefined) return Promise.resolve(this.pair);
    if (this.stopped) return Promise.reject(new Error(`certificate ${this.opts.name}: stopped before one was issued`));
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  /** Renews now if the certificate is missing, expiring, or no longer matches the template. */
  check(trigger: string): void {
    if (this.stopped) return;
    const reason = this.renewReason();
    if (reason !== undefined) this.renew(`${reason} (${trigger})`);
  }

  /** Idempotent: a second call waits for the first. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  private async doStop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    clearTimeout(this.writeTimer);
    this.abort.abort(new Error('certificate manager stopped'));
    await this.obtaining;
    for (const w of this.readyWaiters.splice(0)) w.reject(new Error(`certificate ${this.opts.name}: stopped before one was issued`));
  }

  private renewReason(): string | undefined {
    if (this.summary === undefined) return 'no certificate';
    if (this.deadline !== undefined && Date.now() >= this.deadline.getTime()) return 'past its rotation deadline';
    const mismatch = templateMismatch(this.summary, this.opts.template());
    return mismatch === undefined ? undefined : `the wanted names changed: ${mismatch}`;
  }

  private renew(reason: string): void {
    if (this.obtaining !== undefined) {
      // The request in flight may predate this change: look again when it is done.
      this.recheck = true;
      return;
    }
    this.log.info('renewing the certificate', { reason });
    this.obtaining = this.obtain().finally(() => {
      this.obtaining = undefined;
      if (this.recheck) {
        this.recheck = false;
        this.check('changed during the last request');
      }
    });
  }

  private async obtain(): Promise<void> {
    this.backoff.reset();
    while (!this.stopped) {
      const want = this.opts.template();
      try {
        // node-forge only when a certificate is requested (read-certificate.ts says why).
        const { createSigningRequest } = await import('./pki.js');
        const { csr, key } = createSigningRequest(want);
        const cert = await this.opts.source.sign(
          {
            namePrefix: `${this.opts.name}-`,
            csr,
            signerName: want.signerName,
            usages: want.usages,
            ...(this.opts.expirationSeconds !== undefined ? { expirationSeconds: this.opts.expirationSeconds } : {}),
          },
          this.abort.signal,
        );
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run while we waited
        if (this.stopped) return;
        const pair = { cert, key };
        const summary = describeCertificate(cert);
        const path = await this.saveIssued(pair);
        this.install(pair, summary);
        this.log.info('certificate rotated', {
          path: path ?? 'not stored yet',
          notAfter: summary.notAfter.toISOString(),
          renewAt: this.deadline?.toISOString(),
        });
        for (const listener of this.listeners) listener(pair);
        const altered = templateMismatch(summary, want);
        if (altered !== undefined) {
          // Asking again would get the same answer: keep it, and say so.
          this.log.warn('the signer issued other names than requested', { difference: altered });
          return;
        }
        // The wanted names may have changed while we waited for the signer.
        if (templateMismatch(summary, this.opts.template()) === undefined) return;
      } catch (err: unknown) {
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- stop() may have run while we waited
        if (this.stopped) return;
        const delay = this.backoff.next();
        this.log.warn('could not obtain a certificate; retrying', { error: errorMessage(err), retryInMs: Math.round(delay) });
        await sleep(delay, this.abort.signal);
      }
    }
  }

  /**
   * Writes the issued certificate; undefined when that failed. The certificate is used from memory
   * all the same and the same one written again with backoff, apart from the requests: a new request
   * for each failed write would have the cluster sign certificate after certificate, and a write that
   * keeps failing must not hold up a renewal.
   */
  private async saveIssued(pair: CertKeyPair): Promise<string | undefined> {
    clearTimeout(this.writeTimer);
    this.writeBackoff.reset();
    try {
      return await this.opts.store.save(pair);
    } catch (err: unknown) {
      this.retryWrite(pair, err);
      return undefined;
    }
  }

  private retryWrite(pair: CertKeyPair, err: unknown): void {
    const delay = this.writeBackoff.next();
    this.log.warn('could not store the issued certificate; using it from memory and retrying the write', {
      dir: this.opts.store.dir,
      error: errorMessage(err),
      retryInMs: Math.round(delay),
    });
    this.writeTimer = setTimeout(() => {
      // A newer certificate has a write of its own.
      if (this.stopped || this.pair !== pair) return;
      this.opts.store.save(pair).then(
        (path) => this.log.info('certificate stored', { path }),
        (again: unknown) => {
          if (!this.stopped && this.pair === pair) this.retryWrite(pair, again);
        },
      );
    }, delay);
    this.writeTimer.unref();
  }

  private install(pair: CertKeyPair, summary: CertificateSummary): void {
    this.pair = pair;
    this.summary = summary;
    this.deadline = rotationDeadline(summary.notBefore, summary.notAfter, this.random);
    for (const w of this.readyWaiters.splice(0)) w.resolve(pair);
    this.schedule();
  }

  private schedule(): void {
    clearTimeout(this.timer);
    if (this.stopped || this.deadline === undefined) return;
    const wait = Math.max(0, Math.min(this.deadline.getTime() - Date.now(), MAX_TIMER_MS));
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (Date.now() >= this.deadline!.getTime()) this.check('rotation deadline');
      else this.schedule();
    }, wait);
    this.timer.unref();
  }
}
