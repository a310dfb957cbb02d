// A real control plane for a test file: etcd, kube-apiserver and, when asked,
// kube-controller-manager (signing CSRs with the run's CA), on free loopback
// ports in a temporary folder. kube-apiserver can be restarted with an
// egress selector (HTTPConnect or GRPC over a Unix socket) keeping etcd's data.
//
//   const cp = await startControlPlane({ controllerManager: true });
//   await cp.kubectl(['get', '--raw', '/readyz']);
//   await cp.restartAPIServer({ egressSelector: { mode: 'GRPC', udsPath } });
//   await cp.stop();

import { execFile } from 'node:child_process';
import { request } from 'node:https';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freeLowPort } from '../../../hack/ports.js';
import type { CertKeyPair } from '../../../pkg/certs/pki.js';
import { findControlPlane, type ControlPlaneBinaries } from './binaries.js';
import { ControlPlaneProcess } from './child.js';
import { controlPlanePKI, kubeconfigYAML, type ControlPlanePKI } from './pki.js';

export interface EgressSelector {
  mode: 'HTTPConnect' | 'GRPC';
  udsPath: string;
}

export interface ControlPlaneOptions {
  controllerManager?: boolean;
  /**
   * More kube-apiserver flags (e.g. --watch-cache=false so that watches see etcd compaction). One
   * named like a default replaces it (`--kubelet-certificate-authority=` drops the kubelet CA).
   */
  apiserverArgs?: string[];
  egressSelector?: EgressSelector;
  /**
   * kube-apiserver runs under `prefix` (e.g. inside a network namespace: `ip netns exec <ns>`);
   * before it starts, `reach` makes etcd's port (on this namespace's loopback) reachable where
   * it runs, and its own port reachable here, on the same loopback address and port.
   */
  apiserverIn?: { prefix: string[]; reach(ports: { etcd: number; apiserver: number }): Promise<void> };
}

export interface KubectlResult {
  code: number;
  stdout: string;
  stderr: string;
}

function egressConfigYAML(e: EgressSelector): string {
  return [
    'apiVersion: apiserver.k8s.io/v1beta1',
    'kind: EgressSelectorConfiguration',
    'egressSelections:',
    '- name: cluster',
    '  connection:',
    `    proxyProtocol: ${e.mode}`,
    '    transport:',
    '      uds:',
    `        udsName: ${e.udsPath}`,
    '',
  ].join('\n');
}

export class ControlPlane {
  private apiserver: ControlPlaneProcess | undefined;
  private controllerManager: ControlPlaneProcess | undefined;
  private etcd: ControlPlaneProcess | undefined;
  private apiserverPort = 0;

  private constructor(
    readonly dir: string,
    readonly bins: ControlPlaneBinaries,
    readonly pki: ControlPlanePKI,
    private readonly apiserverArgs: readonly string[] = [],
    private readonly apiserverIn?: ControlPlaneOptions['apiserverIn'],
  ) {}

  get url(): string {
    return `https://127.0.0.1:${this.apiserverPort}`;
  }

  get port(): number {
    return this.apiserverPort;
  }

  /** An administrator's kubeconfig (O=system:masters). */
  get adminKubeconfig(): string {
    return join(this.dir, 'admin.kubeconfig');
  }

  /** Writes a kubeconfig for another identity (a node, a tunnel server) and returns its path. */
  async kubeconfigFor(name: string, user: CertKeyPair): Promise<string> {
    const path = join(this.dir, `${name}.kubeconfig`);
    await writeFile(path, kubeconfigYAML(this.url, this.pki.ca.cert, user), { mode: 0o600 });
    return path;
  }

  static async start(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
    const bins = findControlPlane();
    if ('missing' in bins) throw new Error(bins.missing);
    const dir = await mkdtemp(join(tmpdir(), 'yt-envtest-'));
    const cp = new ControlPlane(dir, bins, controlPlanePKI(), opts.apiserverArgs, opts.apiserverIn);
    try {
      await cp.writeFiles();
      await cp.startEtcd();
      await cp.startAPIServer(opts.egressSelector);
      await writeFile(cp.adminKubeconfig, kubeconfigYAML(cp.url, cp.pki.ca.cert, cp.pki.admin), { mode: 0o600 });
      if (opts.controllerManager === true) await cp.startControllerManager();
    } catch (err: unknown) {
      await cp.stop();
      throw err;
    }
    return cp;
  }

  private file(name: string): string {
    return join(this.dir, name);
  }

  private async writeFiles(): Promise<void> {
    const { ca, apiserver, kubeletClient, serviceAccountKey } = this.pki;
    await Promise.all([
      writeFile(this.file('ca.crt'), ca.cert),
      writeFile(this.file('ca.key'), ca.key, { mode: 0o600 }),
      writeFile(this.file('apiserver.crt'), apiserver.cert),
      writeFile(this.file('apiserver.key'), apiserver.key, { mode: 0o600 }),
      writeFile(this.file('kubelet-client.crt'), kubeletClient.cert),
      writeFile(this.file('kubelet-client.key'), kubeletClient.key, { mode: 0o600 }),
      writeFile(this.file('sa.key'), serviceAccountKey, { mode: 0o600 }),
    ]);
  }

  private async startEtcd(): Promise<void> {
    const [client, peer] = [await freeLowPort(), await freeLowPort()];
    this.etcdPort = client;
    this.etcdURL = `http://127.0.0.1:${client}`;
    this.etcd = new ControlPlaneProcess(
      'etcd',
      this.bins.etcd,
      [
        '--name=default',
        `--data-dir=${this.file('etcd-data')}`,
        `--listen-client-urls=${this.etcdURL}`,
        `--advertise-client-urls=${this.etcdURL}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`,
        `--initial-cluster=default=http://127.0.0.1:${peer}`,
      ],
      this.file('etcd.log'),
    );
  }

  private etcdURL = '';
  private etcdPort = 0;
  private reached = false;
  /** The egress selector kube-apiserver was last started with. */
  private egress: EgressSelector | undefined;

  private async startAPIServer(egress: EgressSelector | undefined): Promise<void> {
    // A restart keeps the port, so that kubeconfigs already handed out stay right.
    if (this.apiserverPort === 0) this.apiserverPort = await freeLowPort();
    const args = [
      `--etcd-servers=${this.etcdURL}`,
      `--secure-port=${this.apiserverPort}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      `--cert-dir=${this.file('apiserver-certs')}`,
      `--tls-cert-file=${this.file('apiserver.crt')}`,
      `--tls-private-key-file=${this.file('apiserver.key')}`,
      `--client-ca-file=${this.file('ca.crt')}`,
      `--service-account-key-file=${this.file('sa.key')}`,
      `--service-account-signing-key-file=${this.file('sa.key')}`,
      '--service-account-issuer=https://kubernetes.default.svc',
      '--service-cluster-ip-range=10.96.0.0/12',
      '--authorization-mode=Node,RBAC',
      '--endpoint-reconciler-type=none',
      // Pods in tests have no service account (no controller makes them).
      '--disable-admission-plugins=ServiceAccount',
      `--kubelet-client-certificate=${this.file('kubelet-client.crt')}`,
      `--kubelet-client-key=${this.file('kubelet-client.key')}`,
      `--kubelet-certificate-authority=${this.file('ca.crt')}`,
      '--kubelet-preferred-address-types=InternalIP',
    ];
    const flagName = (arg: string): string => arg.split('=')[0]!;
    const replaced = new Set(this.apiserverArgs.map(flagName));
    args.splice(0, args.length, ...args.filter((a) => !replaced.has(flagName(a))), ...this.apiserverArgs.filter((a) => !/^--[^=]+=$/.test(a)));
    this.egress = egress;
    if (egress !== undefined) {
      await writeFile(this.file('egress.yaml'), egressConfigYAML(egress));
      args.push(`--egress-selector-config-file=${this.file('egress.yaml')}`);
    }
    if (this.apiserverIn !== undefined && !this.reached) {
      await this.apiserverIn.reach({ etcd: this.etcdPort, apiserver: this.apiserverPort });
      this.reached = true;
    }
    this.apiserver = new ControlPlaneProcess('kube-apiserver', this.bins.kubeAPIServer, args, this.file('kube-apiserver.log'), this.apiserverIn?.prefix);
    await this.waitReady(this.apiserver, '/readyz', this.apiserverPort, 60_000);
  }

  /** Restarts kube-apiserver only (etcd keeps the objects), with another egress selector or none. */
  async restartAPIServer(opts: { egressSelector?: EgressSelector } = {}): Promise<void> {
    await this.apiserver?.stop();
    await this.startAPIServer(opts.egressSelector);
  }

  /**
   * Makes kube-apiserver use `egress` (none when undefined), restarting it only
   * when it runs with another: a test that needs a mode says so, whatever ran before it.
   */
  async useEgressSelector(egress: EgressSelector | undefined): Promise<void> {
    const same = egress === undefined ? this.egress === undefined : this.egress?.mode === egress.mode && this.egress.udsPath === egress.udsPath;
    if (!same) await this.restartAPIServer({ egressSelector: egress });
  }

  private async startControllerManager(): Promise<void> {
    const kubeconfig = await this.kubeconfigFor('controller-manager', this.pki.admin);
    this.controllerManager = new ControlPlaneProcess(
      'kube-controller-manager',
      this.bins.kubeControllerManager,
      [
        `--kubeconfig=${kubeconfig}`,
        `--authentication-kubeconfig=${kubeconfig}`,
        `--authorization-kubeconfig=${kubeconfig}`,
        `--cluster-signing-cert-file=${this.file('ca.crt')}`,
        `--cluster-signing-key-file=${this.file('ca.key')}`,
        '--controllers=csrsigning,csrapproving',
        '--leader-elect=false',
        '--bind-address=127.0.0.1',
        `--secure-port=${await freeLowPort()}`,
      ],
      this.file('kube-controller-manager.log'),
    );
  }

  private async waitReady(proc: ControlPlaneProcess, path: string, port: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let last = '';
    while (Date.now() < deadline) {
      if (!proc.running) throw new Error(`${proc.name} exited while starting:\n${await proc.tail()}`);
      try {
        const { status, body } = await this.get(port, path);
        if (status === 200) return;
        last = `${status} ${body.slice(0, 300)}`;
      } catch (err: unknown) {
        last = (err as Error).message;
      }
      await sleep(250);
    }
    throw new Error(`${proc.name} not ready within ${timeoutMs} ms (last answer: ${last}):\n${await proc.tail()}`);
  }

  private get(port: number, path: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port, path, ca: this.pki.ca.cert, cert: this.pki.admin.cert, key: this.pki.admin.key, agent: false, timeout: 5000 },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timed out')));
      req.on('error', reject);
      req.end();
    });
  }

  /** Compacts etcd's history up to now (through its JSON gateway): watches from older versions get 410 Gone. */
  async compactEtcd(): Promise<void> {
    const post = async (path: string, body: object): Promise<Record<string, unknown>> => {
      const res = await fetch(`${this.etcdURL}${path}`, { method: 'POST', body: JSON.stringify(body) });
      if (!res.ok) throw new Error(`etcd ${path}: ${res.status} ${await res.text()}`);
      return (await res.json()) as Record<string, unknown>;
    };
    const range = await post('/v3/kv/range', { key: Buffer.from('/').toString('base64') });
    const revision = (range.header as { revision: string }).revision;
    await post('/v3/kv/compaction', { revision, physical: true });
  }

  /** Runs kubectl as the administrator; never throws for a non-zero exit. */
  kubectl(args: string[], opts: { timeoutMs?: number; input?: string } = {}): Promise<KubectlResult> {
    return new Promise((resolve) => {
      const child = execFile(
        this.bins.kubectl,
        [`--kubeconfig=${this.adminKubeconfig}`, ...args],
        { timeout: opts.timeoutMs ?? 30_000, maxBuffer: 64 * 1024 * 1024, encoding: 'buffer' },
        (err, stdout, stderr) => {
          const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1;
          resolve({ code, stdout: stdout.toString('utf8'), stderr: stderr.toString() });
        },
      );
      if (opts.input !== undefined) child.stdin!.end(opts.input);
      else child.stdin!.end();
    });
  }

  /** `kubectl apply -f -` of a JSON object (or list); throws with kubectl's message on failure. */
  async apply(obj: object): Promise<void> {
    const r = await this.kubectl(['apply', '-f', '-'], { input: JSON.stringify(obj) });
    if (r.code !== 0) throw new Error(`kubectl apply failed: ${r.stderr}`);
  }

  async stop(): Promise<void> {
    await this.controllerManager?.stop();
    await this.apiserver?.stop();
    await this.etcd?.stop();
    await rm(this.dir, { recursive: true, force: true });
  }
}

export const startControlPlane = (opts?: ControlPlaneOptions): Promise<ControlPlane> => ControlPlane.start(opts);
