// The iptables manager (OpenYurt's, spec/yurttunnel.md §4.2, shaped like
// kube-proxy's proxier): on the host it shares with kube-apiserver, TCP that
// this host sends to a node's kubelet ports (and the ConfigMap's proxy ports)
// is DNATed to the master ports, except towards the nodes reached directly
// (cloud nodes, loopback). Node and ConfigMap events ask for a sync; a sync
// computes our chains, compares them with what iptables-save shows, and
// applies the difference with one iptables-restore --noflush per family. At
// start it removes what an earlier run left; stop() removes everything it made.

import { Gauge, type Registry } from '../metrics/prom.js';
import type { V1Node } from '../kube/types.js';
import type { InformerHandler } from '../kube/informer.js';
import type { ServerConfig } from '../kube/server-config.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { IptablesError } from './errors.js';
import { staleConntrackEntries } from './conntrack.js';
import { chooseBackend, CommandRunner, commandExists, type IptablesBackend } from './exec.js';
import { describeChains, desiredChains, parseNatTable, restoreText, type Chains } from './rules.js';
import { SyncRunner } from './sync-runner.js';
import { canonicalIP, computeTargets, FAMILIES, isEdgeNode, type Family, type MasterAddresses, type Targets } from './targets.js';

export const DEFAULT_SYNC_PERIOD_MS = 60_000;
export const MIN_SYNC_PERIOD_MS = 15_000;

/** The Node informer, as far as the manager uses it. */
export interface NodeSource {
  list(): V1Node[];
  addHandler(handler: InformerHandler<V1Node>): () => void;
  waitForSync(): Promise<void>;
}

/** The server ConfigMap, live (pkg/kube/server-config-source.ts). */
export interface ServerConfigFeed {
  current(): ServerConfig;
  subscribe(fn: (now: ServerConfig, before: ServerConfig) => void): () => void;
  waitForSync(): Promise<void>;
}

export interface IptablesManagerOptions {
  nodes: NodeSource;
  config: ServerConfigFeed;
  /** Where the master ports listen (their bound ports). */
  master: MasterAddresses;
  /** The full check against the system (--iptables-sync-period). */
  syncPeriodMs?: number;
  /** Syncs start at most this often; events in between are one sync. Default 200 ms. */
  minSyncIntervalMs?: number;
  runner?: CommandRunner;
  logger: Logger;
  metricsRegistry?: Registry;
}

export interface SyncReport {
  /** A full check (start, the period, a retry) rather than an event. */
  full: boolean;
  /** The families whose nat table was restored (empty: nothing changed). */
  restored: Family[];
  /** conntrack deletions run. */
  conntrackDeletions: number;
  targets: Targets;
}

/** What of a node the rules depend on. */
function nodeFacts(node: V1Node): string {
  const addresses = (node.status?.addresses ?? [])
    .filter((a) => a.type === 'InternalIP' || a.type === 'ExternalIP')
    .map((a) => canonicalIP(a.address)?.address ?? '');
  return `${isEdgeNode(node)} ${addresses.sort().join(',')}`;
}

function chainsKey(chains: Chains): string {
  return JSON.stringify([...chains]);
}

const CONNTRACK_NO_ENTRIES = /0 flow entries have been deleted/;

export class IptablesManager {
  private readonly log: Logger;
  private readonly runner: CommandRunner;
  private readonly syncRunner: SyncRunner;
  private readonly cloudNodes: Gauge;
  private backend: IptablesBackend | undefined;
  private ipv6 = false;
  /** What each family's table held after the last sync (chainsKey), so an event that changes nothing reads nothing. */
  private readonly applied = new Map<Family, string>();
  private lastTargets: Targets | undefined;
  private readonly unsubscribe: (() => void)[] = [];
  private readonly warned = new Set<string>();
  private stopping: Promise<void> | undefined;
  /** Observers of each sync (tests, the log). */
  private readonly syncListeners = new Set<(report: SyncReport) => void>();
  /** Syncs done, and how many of them ran iptables-restore (a restore per family counts once). */
  syncs = 0;
  restores = 0;

  constructor(private readonly opts: IptablesManagerOptions) {
    this.log = opts.logger.child({ component: 'iptables' });
    this.runner = opts.runner ?? new CommandRunner();
    const periodMs = opts.syncPeriodMs ?? DEFAULT_SYNC_PERIOD_MS;
    this.syncRunner = new SyncRunner((full) => this.sync(full), { minIntervalMs: opts.minSyncIntervalMs ?? 200, periodMs, retryMs: 1000 });
    this.cloudNodes = new Gauge({
      name: 'yurttunnel_server_cloud_nodes_counter',
      help: 'Cloud nodes (no openyurt.io/is-edge-worker=true) whose addresses the iptables rules let through directly.',
      registers: opts.metricsRegistry ? [opts.metricsRegistry] : [],
    });
  }

  /**
   * Picks the backend, removes what an earlier run left (in every backend),
   * and starts syncing once the nodes and the ConfigMap are read. Throws an
   * IptablesError naming what is missing (a binary, NET_ADMIN); the manager
   * is then inert and stop() does nothing.
   */
  async start(): Promise<void> {
    const { chosen, present } = await chooseBackend(this.runner);
    this.backend = chosen;
    this.ipv6 = (await this.families(chosen)).includes(6);
    this.log.info('iptables backend chosen', { mode: chosen.mode ?? 'default', reason: chosen.reason, ipv6: this.ipv6 });
    for (const b of present) await this.removeOurs(b, 'removed the rules an earlier run left');

    // Events before both are read would sync half a picture; the first sync comes once they are.
    let ready = false;
    const request = (): void => {
      if (ready) this.syncRunner.request();
    };
    this.unsubscribe.push(
      this.opts.nodes.addHandler({
        add: request,
        delete: request,
        update: (old, now) => (nodeFacts(old) !== nodeFacts(now) ? request() : undefined),
      }),
      this.opts.config.subscribe(request),
    );
    void Promise.all([this.opts.nodes.waitForSync(), this.opts.config.waitForSync()]).then(() => {
      if (this.stopping !== undefined) return;
      ready = true;
      this.syncRunner.start();
    });
  }

  /** Calls `fn` after every sync; returns the unsubscribe. */
  onSync(fn: (report: SyncReport) => void): () => void {
    this.syncListeners.add(fn);
    return () => this.syncListeners.delete(fn);
  }

  /** Asks for a sync now (coalesced with any pending one). */
  requestSync(full = false): void {
    this.syncRunner.request(full);
  }

  /** The families whose save and restore commands the backend has. */
  private async families(b: IptablesBackend): Promise<Family[]> {
    const present: Family[] = [];
    for (const f of FAMILIES) {
      if ((await commandExists(this.runner, b.save[f])) && (await commandExists(this.runner, b.restore[f]))) present.push(f);
    }
    return present;
  }

  /** Deletes our chains and every jump to them from one backend's tables. */
  private async removeOurs(b: IptablesBackend, message: string): Promise<void> {
    for (const family of await this.families(b)) {
      // Without -t: a table not loaded stays so (legacy's nat on an nft host), and it holds nothing of ours.
      const current = parseNatTable(await this.runner.must(b.save[family], []));
      const text = restoreText(current, new Map());
      if (text === undefined) continue;
      await this.runner.must(b.restore[family], ['-w', '5', '--noflush'], text);
      this.log.info(message, { mode: b.mode ?? 'default', family: `ipv${family}`, chains: [...current.chains.keys()].join(','), jumps: current.jumps.length });
    }
  }

  private warnOnce(key: string, message: string, fields: Record<string, unknown>): void {
    if (this.warned.has(key)) return;
    this.warned.add(key);
    this.log.warn(message, fields);
  }

  private async sync(full: boolean): Promise<void> {
    const b = this.backend!;
    const targets = computeTargets(this.opts.nodes.list(), this.opts.config.current(), this.opts.master);
    this.cloudNodes.set(targets.cloudNodes);
    for (const u of targets.unreachable) {
      if (u.family === 4 || targets.nodesHaveIPv6) {
        this.warnOnce(
          `unreachable ${u.family} ${u.port}`,
          `port ${u.port} is not redirected for IPv${u.family}: the ${u.masterPort} master port does not listen on that family`,
          {
            port: u.port,
            masterPort: u.masterPort,
          },
        );
      }
    }
    const restored: Family[] = [];
    try {
      for (const family of FAMILIES) {
        if (family === 6 && !this.ipv6) {
          if (targets.nodesHaveIPv6)
            this.warnOnce('no ip6tables', `nodes have IPv6 addresses but ${b.restore[6]} is not on the PATH: IPv6 connections are not redirected`, {});
          continue;
        }
        const desired: Chains = family === 4 || targets.nodesHaveIPv6 ? desiredChains(targets.families[family]) : new Map<string, string[]>();
        const key = chainsKey(desired);
        if (!full && this.applied.get(family) === key) continue;
        this.applied.delete(family);
        const current = parseNatTable(await this.runner.must(b.save[family], ['-t', 'nat']));
        const text = restoreText(current, desired);
        if (text !== undefined) {
          await this.runner.must(b.restore[family], ['-w', '5', '--noflush'], text);
          restored.push(family);
          this.restores++;
          this.log.info('iptables rules written', {
            family: `ipv${family}`,
            rules: describeChains(desired),
            direct: targets.families[family].direct.length,
            cloudNodes: targets.cloudNodes,
          });
        }
        this.applied.set(family, key);
      }
    } catch (err: unknown) {
      this.warnOnce(`sync ${errorMessage(err)}`, 'iptables sync failed; retrying', { error: errorMessage(err) });
      this.log.verbose(2, 'iptables sync failed', { error: errorMessage(err) });
      throw err;
    }
    let conntrackDeletions = 0;
    if (this.lastTargets !== undefined) {
      for (const family of FAMILIES) {
        if (family === 6 && (!this.ipv6 || !targets.nodesHaveIPv6)) continue;
        for (const args of staleConntrackEntries(this.lastTargets.families[family], targets.families[family])) {
          if (await this.conntrack(args)) conntrackDeletions++;
        }
      }
    }
    this.lastTargets = targets;
    this.syncs++;
    const report: SyncReport = { full, restored, conntrackDeletions, targets };
    for (const fn of this.syncListeners) fn(report);
  }

  /** Runs one `conntrack -D`; "0 flow entries" is success; a missing binary is one warning. */
  private async conntrack(args: string[]): Promise<boolean> {
    try {
      const r = await this.runner.run('conntrack', args);
      if (r.code === 0 || CONNTRACK_NO_ENTRIES.test(r.stderr)) return true;
      this.log.warn('conntrack could not delete stale entries', { args: args.join(' '), error: r.stderr.trim() });
    } catch (err: unknown) {
      if (err instanceof IptablesError && err.code === 'YT_ERR_IPTABLES_MISSING') {
        this.warnOnce(
          'no conntrack',
          'conntrack is not on the PATH: connections already redirected (or not) keep their old path until they end; install conntrack',
          {},
        );
      } else {
        this.log.warn('conntrack failed', { args: args.join(' '), error: errorMessage(err) });
      }
    }
    return false;
  }

  /** Stops syncing and removes every rule and chain it made. Idempotent. */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const off of this.unsubscribe.splice(0)) off();
      this.syncListeners.clear();
      await this.syncRunner.stop();
      if (this.backend === undefined) return;
      try {
        await this.removeOurs(this.backend, 'iptables rules removed');
      } catch (err: unknown) {
        this.log.error('could not remove the iptables rules; remove chain TUNNEL-PORT and its jump from OUTPUT by hand', { error: errorMessage(err) });
      }
    })();
    return this.stopping;
  }
}
