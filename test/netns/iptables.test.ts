// The iptables manager for real: a child process inside a network namespace
// (never the root one) runs the manager on Node and ConfigMap informers of a
// real kube-apiserver (envtest, on the root namespace's loopback, carried into
// the namespace over a Unix socket). Probes from the namespace show where TCP
// connections land: the stand-in master ports, or the "far" namespace behind
// a veth that holds every node address. iptables-save shows the rest.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { IptablesChildCommand, IptablesChildMessage, IptablesChildOptions } from '../support/iptables-child.js';
import { controlPlaneSkipReason, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { suiteHarness, type Harness } from '../support/harness.js';
import {
  commandSkipReason,
  exposePort,
  NetworkNamespace,
  netnsSkipReason,
  probeTCP,
  startBanners,
  vethPair,
  type ProbeResult,
} from '../support/netns/index.js';
import type { Proc } from '../support/processes.js';
import { repoRoot } from '../support/upstream.js';

const CHILD = join(repoRoot(), 'dist/test/support/iptables-child.js');

function skipReason(): string | undefined {
  return (
    netnsSkipReason() ??
    commandSkipReason('iptables-nft-save', 'apt-get install iptables') ??
    commandSkipReason('iptables-legacy-save', 'apt-get install iptables') ??
    commandSkipReason('conntrack', 'apt-get install conntrack') ??
    commandSkipReason('setpriv', 'apt-get install util-linux') ??
    controlPlaneSkipReason()
  );
}

const skip = skipReason();

const EDGE = { 'openyurt.io/is-edge-worker': 'true' };

const FOREIGN = [
  '*nat',
  ':SOMEONE-ELSE - [0:0]',
  '-A OUTPUT -p udp -m comment --comment "someone else" -j SOMEONE-ELSE',
  '-A SOMEONE-ELSE -p udp -j RETURN',
  'COMMIT',
  '',
].join('\n');
/** What an earlier run (ours or OpenYurt's) may have left: a jump twice, a wrong DNAT, a chain for a port no longer configured. */
const LEFTOVERS_NFT = [
  '*nat',
  ':TUNNEL-PORT - [0:0]',
  ':TUNNEL-PORT-10250 - [0:0]',
  ':TUNNEL-PORT-9999 - [0:0]',
  '-A OUTPUT -p tcp -m comment --comment "yurttunnel server port" -j TUNNEL-PORT',
  '-A OUTPUT -p tcp -m comment --comment "yurttunnel server port" -j TUNNEL-PORT',
  '-A TUNNEL-PORT -p tcp -m tcp --dport 10250 -m comment --comment "jump to port 10250" -j TUNNEL-PORT-10250',
  '-A TUNNEL-PORT-10250 -p tcp -m tcp --dport 10250 -j DNAT --to-destination 127.0.0.1:1',
  '-A TUNNEL-PORT-9999 -p tcp -m tcp --dport 9999 -j DNAT --to-destination 127.0.0.1:1',
  'COMMIT',
  '',
].join('\n');
const LEFTOVERS_LEGACY = ['*nat', ':TUNNEL-PORT - [0:0]', '-A OUTPUT -p tcp -m comment --comment "yurttunnel server port" -j TUNNEL-PORT', 'COMMIT', ''].join(
  '\n',
);
const LEGACY_RULES = [
  '*filter',
  ':LEGACY-ONLY - [0:0]',
  '-A LEGACY-ONLY -j RETURN',
  '-A LEGACY-ONLY -p tcp -j RETURN',
  '-A LEGACY-ONLY -p udp -j RETURN',
  'COMMIT',
  '',
].join('\n');

const SECURE = 20263;
const INSECURE = 20264;
const FAR = ['10.251.0.2', '10.251.0.3', '10.251.0.4', '10.251.0.5', '10.251.0.6', 'fd00:251::2', 'fd00:251::3'];
const PORTS = [10250, 10255, 9100, 9443];

/** The manager in a child process inside `ns`, spoken to over IPC. */
class ManagerChild {
  readonly messages: IptablesChildMessage[] = [];
  private waiters: (() => void)[] = [];

  constructor(readonly proc: Proc) {
    proc.child.on('message', (m: IptablesChildMessage) => {
      this.messages.push(m);
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  static start(h: Harness, ns: NetworkNamespace, opts: IptablesChildOptions, prefix: string[] = []): ManagerChild {
    return new ManagerChild(ns.startProcess(h, CHILD, [JSON.stringify(opts)], {}, { ipc: true, prefix }));
  }

  /** The first message from index `from` on that satisfies `match`. */
  async next<T extends IptablesChildMessage>(match: (m: IptablesChildMessage) => m is T, from = 0, timeoutMs = 15_000): Promise<T> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.messages.slice(from).find(match);
      if (found !== undefined) return found;
      if (Date.now() > deadline)
        throw new Error(`no matching message within ${timeoutMs} ms; got ${JSON.stringify(this.messages.slice(from))}; output:\n${this.proc.lines.join('\n')}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 200);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  send(command: IptablesChildCommand): void {
    this.proc.child.send(command);
  }
}

const isSync = (m: IptablesChildMessage): m is Extract<IptablesChildMessage, { type: 'sync' }> => m.type === 'sync';
const isRestoringSync = (m: IptablesChildMessage): m is Extract<IptablesChildMessage, { type: 'sync' }> => m.type === 'sync' && m.restored.length > 0;

/** The user chains and the rules of every table of one backend and family, as `<table> <line>`. */
async function userRules(ns: NetworkNamespace, save: string): Promise<string[]> {
  let table = '';
  const lines: string[] = [];
  for (const l of (await ns.must(save, [])).split('\n')) {
    if (l.startsWith('*')) table = l.slice(1);
    else if (l.startsWith('-A ') || /^:\S+ - /.test(l)) lines.push(`${table} ${l.replace(/ \[\d+:\d+\]$/, '')}`);
  }
  return lines;
}

const SAVES = ['iptables-nft-save', 'ip6tables-nft-save', 'iptables-legacy-save', 'ip6tables-legacy-save'];

async function allRules(ns: NetworkNamespace): Promise<Record<string, string[]>> {
  return Object.fromEntries(await Promise.all(SAVES.map(async (save) => [save, await userRules(ns, save)] as const)));
}

/** The nat table's chain declarations and rules. */
async function natLines(ns: NetworkNamespace, save = 'iptables-nft-save'): Promise<string[]> {
  return (await ns.must(save, ['-t', 'nat'])).split('\n').filter((l) => l.startsWith('-A ') || l.startsWith(':'));
}

function ourChains(lines: string[]): string[] {
  return lines.filter((l) => /^:TUNNEL-PORT/.test(l)).map((l) => l.slice(1).split(' ')[0]!);
}

function landed(r: ProbeResult): string {
  return r.ok ? r.data : `error ${r.code}`;
}

describe('iptables manager in a network namespace', { skip }, () => {
  const suite = suiteHarness();
  let cp: ControlPlane;
  let host: NetworkNamespace;
  let dir: string;
  let childOpts: IptablesChildOptions;
  let pristine: Record<string, string[]>;
  let child: ManagerChild;

  async function kubectl(args: string[], input?: string): Promise<void> {
    const r = await cp.kubectl(args, input === undefined ? {} : { input });
    if (r.code !== 0) throw new Error(`kubectl ${args.join(' ')}: ${r.stderr}`);
  }

  async function createNode(name: string, addresses: string[], labels: Record<string, string> = {}): Promise<void> {
    const node = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name, labels },
      status: { addresses: addresses.map((address) => ({ type: 'InternalIP', address })) },
    };
    await kubectl(['create', '-f', '-'], JSON.stringify(node));
  }

  /** Runs `change` and returns how long after it the manager had restored the rules. */
  async function reactionMs(change: () => Promise<void>): Promise<number> {
    const mark = child.messages.length;
    await change();
    const changedAt = performance.now();
    await child.next(isRestoringSync, mark);
    return performance.now() - changedAt;
  }

  async function setConfigMap(data: Record<string, string>): Promise<void> {
    await kubectl(
      ['apply', '-f', '-'],
      JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'yurt-tunnel-server-cfg', namespace: 'kube-system' }, data }),
    );
  }

  const probe = async (ip: string, port: number): Promise<string> => landed(await probeTCP(host, ip, port));

  before(async () => {
    cp = await startControlPlane();
    suite.defer(() => cp.stop());
    dir = await mkdtemp(join(tmpdir(), 'yt-iptables-'));
    suite.defer(() => rm(dir, { recursive: true, force: true }));
    host = await NetworkNamespace.create(suite, 'yt-ipt');
    const far = await NetworkNamespace.create(suite, 'yt-far');
    await vethPair(
      { ns: host, name: 'to-far', addresses: ['10.251.0.1/24', 'fd00:251::1/64'] },
      { ns: far, name: 'to-host', addresses: FAR.map((ip) => (ip.includes(':') ? `${ip}/64` : `${ip}/24`)) },
    );
    // Every node address answers directly from the far namespace; the master ports and a local kubelet answer in the host namespace.
    await startBanners(
      suite,
      far,
      FAR.flatMap((ip) => PORTS.map((port) => ({ host: ip, port, banner: `direct ${ip}:${port}` }))),
    );
    await startBanners(suite, host, [
      { host: '127.0.0.1', port: SECURE, banner: 'master secure' },
      { host: '::1', port: SECURE, banner: 'master secure' },
      { host: '127.0.0.1', port: INSECURE, banner: 'master insecure' },
      { host: '::1', port: INSECURE, banner: 'master insecure' },
      { host: '127.0.0.1', port: 10250, banner: 'local kubelet' },
    ]);
    await exposePort(suite, { to: host, port: cp.port });
    childOpts = {
      kubeconfig: cp.adminKubeconfig,
      master: { secure: { host: '::', port: SECURE }, insecure: { host: '::', port: INSECURE } },
      syncPeriodMs: 60_000,
    };
    // Someone else's rules, which must survive everything.
    await host.must('iptables-nft-restore', ['--noflush'], FOREIGN);
    pristine = await allRules(host);
  });
  after(() => suite.close());

  test('a missing iptables binary and a missing NET_ADMIN are one clear error each, and nothing is changed', async () => {
    const empty = join(dir, 'empty-path');
    await mkdir(empty);
    const missing = ManagerChild.start(suite, host, { ...childOpts, path: empty });
    const failed = await missing.next((m): m is Extract<IptablesChildMessage, { type: 'start-failed' }> => m.type === 'start-failed');
    assert.equal(failed.code, 'YT_ERR_IPTABLES_MISSING');
    assert.equal(
      failed.message,
      'neither iptables-save/iptables-restore nor their -nft/-legacy variants are on the PATH: install iptables, or set --enable-iptables=false',
    );
    assert.equal(await missing.proc.exited, 0);

    const unprivileged = ManagerChild.start(suite, host, childOpts, ['setpriv', '--inh-caps=-net_admin', '--bounding-set=-net_admin']);
    const refused = await unprivileged.next((m): m is Extract<IptablesChildMessage, { type: 'start-failed' }> => m.type === 'start-failed');
    assert.equal(refused.code, 'YT_ERR_IPTABLES_PERMISSION');
    assert.match(
      refused.message,
      /^iptables-\w+-save may not change the nat table: the process needs the NET_ADMIN capability \(uid 0; run as root with NET_ADMIN, or set --enable-iptables=false\): .*Permission denied/,
    );
    assert.equal(await unprivileged.proc.exited, 0);
    assert.deepEqual(await allRules(host), pristine);
  });

  test('at start the leftovers of an earlier run are cleaned in both backends (a stale per-port chain too); the first sync writes each rule once', async () => {
    await host.must('iptables-nft-restore', ['--noflush'], LEFTOVERS_NFT);
    await host.must('iptables-legacy-restore', ['--noflush'], LEFTOVERS_LEGACY);
    assert.deepEqual(ourChains(await natLines(host)), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-9999']);
    await createNode('cloud-1', ['10.251.0.2', 'fd00:251::2']);
    await createNode('edge-1', ['10.251.0.3', 'fd00:251::3'], EDGE);
    await createNode('edge-2', ['10.251.0.4'], EDGE);

    child = ManagerChild.start(suite, host, childOpts);
    await child.next((m): m is Extract<IptablesChildMessage, { type: 'started' }> => m.type === 'started');
    const first = await child.next(isSync);
    assert.deepEqual(first.restored, [4, 6]);
    assert.equal(first.cloudNodes, 1);
    assert.ok(
      child.proc.lines.some((l) => /removed the rules an earlier run left.*mode=legacy/.test(l)),
      child.proc.lines.join('\n'),
    );

    const nat = await natLines(host);
    assert.deepEqual(ourChains(nat), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255']);
    assert.equal(nat.filter((l) => l.startsWith('-A OUTPUT') && l.includes('-j TUNNEL-PORT')).length, 1, 'one jump from OUTPUT');
    assert.equal(new Set(nat).size, nat.length, 'no rule twice');
    assert.ok(!nat.some((l) => l.includes('127.0.0.1:1 ')), "the earlier run's DNAT is gone");
    assert.deepEqual(ourChains(await natLines(host, 'iptables-legacy-save')), [], 'the legacy backend is clean');
    assert.deepEqual(ourChains(await natLines(host, 'ip6tables-nft-save')), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255']);
    const rules = await allRules(host);
    for (const line of pristine['iptables-nft-save']!) assert.ok(rules['iptables-nft-save']!.includes(line), `someone else's ${line} survives`);
  });

  test("after a sync an edge node's 10250 and 10255 land on the master ports, a cloud node's and loopback's do not", async () => {
    assert.equal(await probe('10.251.0.3', 10250), 'master secure');
    assert.equal(await probe('10.251.0.3', 10255), 'master insecure');
    assert.equal(await probe('fd00:251::3', 10250), 'master secure');
    assert.equal(await probe('10.251.0.4', 10250), 'master secure');
    assert.equal(await probe('10.251.0.2', 10250), 'direct 10.251.0.2:10250');
    assert.equal(await probe('10.251.0.2', 10255), 'direct 10.251.0.2:10255');
    assert.equal(await probe('fd00:251::2', 10250), 'direct fd00:251::2:10250');
    assert.equal(await probe('127.0.0.1', 10250), 'local kubelet');
    assert.equal(await probe('10.251.0.3', 9100), 'direct 10.251.0.3:9100', 'not a proxy port yet');
  });

  test('a second sync with nothing changed runs no restore', async () => {
    const before = await allRules(host);
    const mark = child.messages.length;
    const restores = child.messages.filter(isSync).at(-1)!.restores;
    child.send({ type: 'sync-now', full: true });
    const full = await child.next(isSync, mark);
    assert.deepEqual({ full: full.full, restored: full.restored, restores: full.restores }, { full: true, restored: [], restores });
    child.send({ type: 'sync-now', full: false });
    const quick = await child.next(isSync, mark + 1);
    assert.deepEqual({ full: quick.full, restored: quick.restored, restores: quick.restores }, { full: false, restored: [], restores });
    assert.deepEqual(await allRules(host), before);
  });

  test('a node added, relabelled, readdressed or deleted changes the rules within a second', async (t) => {
    assert.equal(await probe('10.251.0.5', 10250), 'master secure', 'no node has it yet');
    const added = await reactionMs(() => createNode('cloud-2', ['10.251.0.5']));
    assert.equal(await probe('10.251.0.5', 10250), 'direct 10.251.0.5:10250');

    const relabelled = await reactionMs(() => kubectl(['label', 'node', 'edge-2', 'openyurt.io/is-edge-worker=false', '--overwrite']));
    assert.equal(await probe('10.251.0.4', 10250), 'direct 10.251.0.4:10250');

    const mark = child.messages.length;
    const readdressed = await reactionMs(() =>
      kubectl([
        'patch',
        'node',
        'cloud-2',
        '--subresource=status',
        '--type=merge',
        '-p',
        JSON.stringify({ status: { addresses: [{ type: 'InternalIP', address: '10.251.0.6' }] } }),
      ]),
    );
    assert.ok(child.messages.slice(mark).filter(isRestoringSync)[0]!.conntrackDeletions >= 2, 'conntrack entries for both addresses flushed');
    assert.equal(await probe('10.251.0.5', 10250), 'master secure');
    assert.equal(await probe('10.251.0.6', 10250), 'direct 10.251.0.6:10250');

    const deleted = await reactionMs(() => kubectl(['delete', 'node', 'cloud-1']));
    assert.equal(await probe('10.251.0.2', 10250), 'master secure');
    assert.equal(await probe('fd00:251::2', 10250), 'master secure');
    assert.equal(child.messages.filter(isSync).at(-1)!.cloudNodes, 2);

    t.diagnostic(
      `reaction: added ${Math.round(added)} ms, relabelled ${Math.round(relabelled)} ms, readdressed ${Math.round(readdressed)} ms, deleted ${Math.round(deleted)} ms`,
    );
    for (const [what, ms] of Object.entries({ added, relabelled, readdressed, deleted }))
      assert.ok(ms < 1000, `${what}: rules changed ${Math.round(ms)} ms after the API call`);
  });

  test('a ConfigMap change adds and removes ports within a second; DNATed connections of a removed port are flushed', async (t) => {
    const dnatEntries = async (port: number): Promise<number> => {
      const r = await host.run('conntrack', ['-L', '-p', 'tcp', '--dport', String(port), '--dst-nat']);
      return r.stdout.split('\n').filter((l) => l.startsWith('tcp')).length;
    };
    const added = await reactionMs(() => setConfigMap({ 'http-proxy-ports': '9100', 'https-proxy-ports': '9443' }));
    assert.equal(await probe('10.251.0.3', 9100), 'master insecure');
    assert.equal(await probe('10.251.0.3', 9443), 'master secure');
    assert.equal(await probe('10.251.0.6', 9100), 'direct 10.251.0.6:9100');
    assert.deepEqual(ourChains(await natLines(host)), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255', 'TUNNEL-PORT-9100', 'TUNNEL-PORT-9443']);
    assert.ok((await dnatEntries(9100)) >= 1, 'the probe left a DNATed conntrack entry');

    const removed = await reactionMs(() => setConfigMap({ 'https-proxy-ports': '9443' }));
    assert.equal(await dnatEntries(9100), 0, 'flushed with the port');
    assert.deepEqual(ourChains(await natLines(host)), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255', 'TUNNEL-PORT-9443']);
    assert.equal(await probe('10.251.0.3', 9100), 'direct 10.251.0.3:9100');
    assert.equal(await probe('10.251.0.3', 9443), 'master secure');

    const deleted = await reactionMs(() => kubectl(['delete', 'configmap', '-n', 'kube-system', 'yurt-tunnel-server-cfg']));
    assert.deepEqual(ourChains(await natLines(host)), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255']);
    assert.equal(await probe('10.251.0.3', 9443), 'direct 10.251.0.3:9443');

    t.diagnostic(`reaction: added ${Math.round(added)} ms, removed ${Math.round(removed)} ms, deleted ${Math.round(deleted)} ms`);
    for (const [what, ms] of Object.entries({ added, removed, deleted }))
      assert.ok(ms < 1000, `${what}: rules changed ${Math.round(ms)} ms after the API call`);
  });

  test('stop leaves no rule and no chain: every table as before the run', async () => {
    const mark = child.messages.length;
    child.send({ type: 'stop' });
    await child.next((m): m is Extract<IptablesChildMessage, { type: 'stopped' }> => m.type === 'stopped', mark);
    assert.equal(await child.proc.exited, 0);
    assert.deepEqual(await allRules(host), pristine);
    assert.equal(await probe('10.251.0.3', 10250), 'direct 10.251.0.3:10250');
  });

  test('the legacy backend is chosen when it holds more rules, and only it is written; a missing conntrack is one warning', async () => {
    await host.must('iptables-legacy-restore', ['--noflush'], LEGACY_RULES);
    // A PATH with every iptables command and no conntrack.
    const bin = join(dir, 'no-conntrack');
    await mkdir(bin);
    for (const name of ['iptables', ...['', '6'].flatMap((v) => ['nft', 'legacy'].flatMap((m) => [`ip${v}tables-${m}-save`, `ip${v}tables-${m}-restore`]))]) {
      await symlink(execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim(), join(bin, name));
    }
    const legacy = ManagerChild.start(suite, host, { ...childOpts, path: bin });
    await legacy.next(isRestoringSync);
    assert.ok(
      legacy.proc.lines.some((l) => /iptables backend chosen.*mode=legacy.*it holds the most rules \(nft 2, legacy 3\)/.test(l)),
      legacy.proc.lines.join('\n'),
    );
    assert.deepEqual(ourChains(await natLines(host, 'iptables-legacy-save')), ['TUNNEL-PORT', 'TUNNEL-PORT-10250', 'TUNNEL-PORT-10255']);
    assert.deepEqual(ourChains(await natLines(host)), []);
    assert.equal(await probe('10.251.0.3', 10250), 'master secure');
    for (const value of ['true', 'false']) {
      const mark = legacy.messages.length;
      await kubectl(['label', 'node', 'edge-2', `openyurt.io/is-edge-worker=${value}`, '--overwrite']);
      const sync = await legacy.next(isRestoringSync, mark);
      assert.equal(sync.conntrackDeletions, 0);
    }
    assert.equal(legacy.proc.lines.filter((l) => /conntrack is not on the PATH/.test(l)).length, 1, legacy.proc.lines.join('\n'));
    legacy.send({ type: 'stop' });
    assert.equal(await legacy.proc.exited, 0);
    assert.deepEqual(ourChains(await natLines(host, 'iptables-legacy-save')), []);
  });
});
