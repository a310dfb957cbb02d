// The DNS record controller (spec/yurttunnel.md §4.1), shaped like a
// Kubernetes controller: node, Service, ConfigMap and server-configuration
// events only enqueue one of two keys; the worker's sync for a key reads the
// whole state, builds what it should be, compares, and writes a copy when it
// differs. The keys:
//   - kube-system/yurt-tunnel-nodes: the hosts file CoreDNS's `hosts` plugin
//     serves (key `tunnel-nodes`), created if missing;
//   - kube-system/x-tunnel-server-internal-svc: its `dnat-<port>` ports, in
//     step with the server ConfigMap's proxy ports.
// Only the holder of the Lease kube-system/tunnel-dns-controller runs it: it
// starts when this replica becomes leader and stops (its writes in flight
// aborted) when it loses the lease; the process goes on serving and keeps
// trying to lead again.

import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Logger } from '../log/logger.js';
import type { KubeClient } from '../kube/client.js';
import { configMapInformer } from '../kube/config-map-informer.js';
import { ensureConfigMapData, updateService } from '../kube/ensure.js';
import type { Informer, SharedInformer } from '../kube/informer.js';
import { LeaderWork, type LeaseTimings } from '../kube/leader-work.js';
import { requestDeadline } from '../kube/request-options.js';
import { clusterIPOf, TUNNEL_INTERNAL_SERVICE, TUNNEL_NAMESPACE } from '../kube/tunnel-addresses.js';
import type { V1ConfigMap, V1Node, V1Service } from '../kube/types.js';
import { WorkQueue } from '../kube/work-queue.js';
import { hostsText, nodeRecord, recordKey, TUNNEL_NODES_CONFIGMAP, TUNNEL_NODES_KEY, type NodeRecord } from './records.js';
import { planServicePorts, type MasterPortKind, type MasterPorts } from './service-ports.js';

export const DNS_CONTROLLER_LEASE = 'tunnel-dns-controller';
export const DEFAULT_DNS_SYNC_PERIOD_MS = 1800_000;
/** OpenYurt's floor for --dns-sync-period. */
export const MIN_DNS_SYNC_PERIOD_MS = 30_000;

const RECORDS_KEY = `${TUNNEL_NAMESPACE}/${TUNNEL_NODES_CONFIGMAP}`;
const PORTS_KEY = `${TUNNEL_NAMESPACE}/${TUNNEL_INTERNAL_SERVICE}`;
/** The longest one sync's API calls may take. */
const SYNC_TIMEOUT_MS = 15_000;

/** The server ConfigMap (yurt-tunnel-server-cfg), followed live: its proxy ports, by the master port each lands on. */
export interface ProxyPortSource {
  current(): { readonly proxyPorts: ReadonlyMap<number, MasterPortKind> };
  /** `fn` is called after every change (the ConfigMap added, edited or deleted); returns the unsubscribe. */
  subscribe(fn: () => void): () => void;
  /** Resolves once the ConfigMap has been read (or found missing). */
  waitForSync(): Promise<void>;
}

export interface DnsControllerOptions {
  client: KubeClient;
  /** All Nodes. */
  nodes: SharedInformer<V1Node>;
  /** The tunnel's Services in kube-system (label name=yurt-tunnel-server). */
  services: SharedInformer<V1Service>;
  proxyPorts: ProxyPortSource;
  /** Where the `dnat-*` ports point: the port numbers of the server's secure and insecure master ports. */
  masterPorts: MasterPorts;
  /** Full rebuild of both, as well as on every event; clamped to at least 30 s. */
  syncPeriodMs?: number;
  /** This replica in the Lease; default `<hostname>_<uuid>`, as OpenYurt. */
  identity?: string;
  /** Who writes, in the objects' managedFields. Default `yurt-tunnel-dns-controller`. */
  fieldManager?: string;
  lease?: LeaseTimings;
  logger: Logger;
}

interface Leading {
  queue: WorkQueue;
  records: Informer<V1ConfigMap>;
  resync: NodeJS.Timeout;
  /** Aborted when the lease is lost: no write of a former leader lands after that. */
  abort: AbortController;
  /** Events are enqueued once the stores hold the whole state. */
  ready: boolean;
}

export class DnsController {
  readonly identity: string;
  private readonly work: LeaderWork;
  private readonly log: Logger;
  private readonly syncPeriodMs: number;
  private readonly fieldManager: string;
  private leading: Leading | undefined;
  /** Nodes without a record, and why, as last logged. */
  private readonly skipped = new Map<string, string>();
  private reportedPorts = '';
  private stopping: Promise<void> | undefined;
  private readonly unsubscribe: () => void;

  constructor(private readonly opts: DnsControllerOptions) {
    this.identity = opts.identity ?? `${hostname()}_${randomUUID()}`;
    this.fieldManager = opts.fieldManager ?? 'yurt-tunnel-dns-controller';
    this.syncPeriodMs = Math.max(opts.syncPeriodMs ?? DEFAULT_DNS_SYNC_PERIOD_MS, MIN_DNS_SYNC_PERIOD_MS);
    this.log = opts.logger.child({ component: 'dns-controller' });
    this.work = new LeaderWork(opts.client, {
      lease: DNS_CONTROLLER_LEASE,
      identity: this.identity,
      ...(opts.lease !== undefined ? { timings: opts.lease } : {}),
      lead: () => this.lead(),
      unlead: () => this.unlead(),
      what: 'DNS controller',
      logger: this.log,
    });
    opts.nodes.addHandler({
      add: () => this.enqueue(RECORDS_KEY),
      delete: () => this.enqueue(RECORDS_KEY),
      update: (old, node) => {
        if (recordKey(nodeRecord(old, this.tunnelIP())) !== recordKey(nodeRecord(node, this.tunnelIP()))) this.enqueue(RECORDS_KEY);
      },
    });
    const onService = (old: V1Service | undefined, svc: V1Service | undefined): void => {
      const name = (old ?? svc)?.metadata?.name;
      if (name !== TUNNEL_INTERNAL_SERVICE) return;
      if (old === undefined || svc === undefined || clusterIPOf(old) !== clusterIPOf(svc)) this.enqueue(RECORDS_KEY);
      if (old === undefined || svc === undefined || JSON.stringify(old.spec?.ports) !== JSON.stringify(svc.spec?.ports)) this.enqueue(PORTS_KEY);
    };
    opts.services.addHandler({
      add: (svc) => onService(undefined, svc),
      update: onService,
      delete: (svc) => onService(svc, undefined),
    });
    this.unsubscribe = opts.proxyPorts.subscribe(() => this.enqueue(PORTS_KEY));
  }

  /** Takes part in the election; syncs while leading. */
  start(): void {
    this.log.info('DNS controller started: syncing while it holds the lease', {
      lease: `${TUNNEL_NAMESPACE}/${DNS_CONTROLLER_LEASE}`,
      identity: this.identity,
      syncPeriodMs: this.syncPeriodMs,
    });
    this.work.start();
  }

  isLeader(): boolean {
    return this.work.isLeader();
  }

  /** Stops syncing and gives the lease up. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      // Our work ends before the lease is released, so the next leader never writes alongside us.
      await this.work.stop();
      this.unsubscribe();
    })();
    return this.stopping;
  }

  private tunnelIP(): string | undefined {
    const svc = this.opts.services.get(PORTS_KEY);
    return svc === undefined ? undefined : clusterIPOf(svc);
  }

  private enqueue(key: string): void {
    if (this.leading?.ready === true) this.leading.queue.add(key);
  }

  private async lead(): Promise<void> {
    if (this.stopping !== undefined || this.leading !== undefined) return;
    const queue = new WorkQueue({ name: 'dns', sync: (key) => this.sync(key), logger: this.log });
    const records = configMapInformer(this.opts.client, TUNNEL_NAMESPACE, TUNNEL_NODES_CONFIGMAP, this.log);
    // Someone else's edit or delete of the records is undone.
    records.addHandler({ add: () => this.enqueue(RECORDS_KEY), update: () => this.enqueue(RECORDS_KEY), delete: () => this.enqueue(RECORDS_KEY) });
    const resync = setInterval(() => {
      this.enqueue(RECORDS_KEY);
      this.enqueue(PORTS_KEY);
    }, this.syncPeriodMs);
    resync.unref();
    const leading: Leading = { queue, records, resync, abort: new AbortController(), ready: false };
    this.leading = leading;
    records.start();
    // No sync before the stores hold the whole state: a partial node list would drop records.
    await Promise.all([this.opts.nodes.waitForSync(), this.opts.services.waitForSync(), this.opts.proxyPorts.waitForSync()]);
    if (this.leading !== leading) return;
    leading.ready = true;
    queue.add(RECORDS_KEY);
    queue.add(PORTS_KEY);
  }

  private async unlead(): Promise<void> {
    const leading = this.leading;
    if (leading === undefined) return;
    this.leading = undefined;
    clearInterval(leading.resync);
    leading.abort.abort();
    await leading.queue.stop();
    await leading.records.stop();
    this.log.info('DNS controller paused: not the leader');
  }

  private sync(key: string): Promise<void> {
    const leading = this.leading;
    if (leading === undefined) return Promise.resolve();
    const deadline = requestDeadline(leading.abort.signal, SYNC_TIMEOUT_MS);
    const synced = key === RECORDS_KEY ? this.syncRecords(deadline.signal) : this.syncServicePorts(deadline.signal);
    return synced.finally(() => deadline.dispose());
  }

  private async syncRecords(signal: AbortSignal): Promise<void> {
    const tunnelIP = this.tunnelIP();
    const records = this.opts.nodes.list().map((node) => nodeRecord(node, tunnelIP));
    this.reportSkipped(records);
    const outcome = await ensureConfigMapData(this.opts.client, {
      namespace: TUNNEL_NAMESPACE,
      name: TUNNEL_NODES_CONFIGMAP,
      data: { [TUNNEL_NODES_KEY]: hostsText(records) },
      fieldManager: this.fieldManager,
      signal,
    });
    const fields = { configMap: RECORDS_KEY, records: records.filter((r) => 'ip' in r).length, skipped: this.skipped.size };
    if (outcome === 'unchanged') this.log.verbose(4, 'DNS records unchanged', fields);
    else this.log.info(outcome === 'created' ? 'DNS records ConfigMap created' : 'DNS records updated', fields);
  }

  /** One warning per node when it loses its record (or the reason changes), one line when it gets it back. */
  private reportSkipped(records: readonly NodeRecord[]): void {
    const seen = new Set<string>();
    for (const r of records) {
      seen.add(r.name);
      if ('skipped' in r) {
        if (this.skipped.get(r.name) !== r.skipped) this.log.warn(`node ${r.name} gets no DNS record: ${r.skipped}`, { node: r.name });
        this.skipped.set(r.name, r.skipped);
      } else if (this.skipped.delete(r.name)) {
        this.log.info(`node ${r.name} has a DNS record again`, { node: r.name, ip: r.ip });
      }
    }
    for (const name of this.skipped.keys()) if (!seen.has(name)) this.skipped.delete(name);
  }

  private async syncServicePorts(signal: AbortSignal): Promise<void> {
    const wanted = this.opts.proxyPorts.current().proxyPorts;
    let conflicts: string[] = [];
    const outcome = await updateService(this.opts.client, {
      namespace: TUNNEL_NAMESPACE,
      name: TUNNEL_INTERNAL_SERVICE,
      fieldManager: this.fieldManager,
      signal,
      change: (svc) => {
        const plan = planServicePorts(svc.spec?.ports ?? [], wanted, this.opts.masterPorts);
        conflicts = plan.conflicts;
        return plan.ports === undefined ? undefined : { ...svc, spec: { ...svc.spec, ports: plan.ports } };
      },
    });
    const report = outcome === 'missing' ? 'missing' : conflicts.join('; ');
    if (report !== this.reportedPorts) {
      this.reportedPorts = report;
      if (outcome === 'missing') {
        this.log.warn(
          `Service ${PORTS_KEY} not found: no dnat-<port> ports kept and edge nodes get no DNS record until it exists (with the label name=yurt-tunnel-server)`,
        );
      } else if (report !== '') {
        this.log.warn(`Service ${PORTS_KEY}: proxy ports not added: ${report}`);
      }
    }
    if (outcome === 'updated') {
      this.log.info('dnat ports of the internal Service updated', {
        service: PORTS_KEY,
        ports: [...wanted].map(([port, kind]) => `${port}→${kind}`).join(',') || 'none',
      });
    }
  }
}
