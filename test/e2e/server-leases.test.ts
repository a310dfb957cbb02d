// Konnectivity's lease-based server count (issue 37 item 4, anp.md §11)
// against a real kube-apiserver: server processes with
// --enable-lease-controller publish Leases field for field as upstream's,
// collect expired ones with their label, and delete their own on SIGTERM; an
// agent process with --count-server-leases (its kubelet identity, the RBAC
// from manifests/components/ha) counts two, then three servers although each
// announces servercount 1, and fewer once a server killed with -9 lets its
// Lease expire.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fetchAgents } from '../../pkg/meta/agents-status.js';
import { kubeletKubeconfig } from '../support/cluster.js';
import { autoApprove, controlPlaneSkipReason, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness, type Harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { tempDir, waitFor } from '../support/tunnel.js';
import { repoRoot } from '../support/upstream.js';
import { freeLowPort } from '../../hack/ports.js';

const skip = controlPlaneSkipReason();
const NAMESPACE = 'kube-system';
const LABEL = 'k8s-app=konnectivity-server';

interface Lease {
  metadata: { name: string; namespace: string; labels?: Record<string, string> };
  spec: { holderIdentity?: string; leaseDurationSeconds?: number; renewTime?: string; acquireTime?: string };
}

interface Server {
  id: string;
  port: number;
  proc: Proc;
  metaPort: number;
}

describe('server Leases with a real kube-apiserver', { skip }, () => {
  let cp: ControlPlane;
  let approver: ReturnType<typeof autoApprove> | undefined;

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    approver = autoApprove(cp, 'yurttunnel-');
    // The agents' RBAC as the HA component deploys it: nodes may read the server Leases.
    const r = await cp.kubectl(['apply', '-f', join(repoRoot(), 'manifests/components/ha/agent-lease-rbac.yaml')]);
    assert.equal(r.code, 0, r.stderr);
  });
  after(async () => {
    await approver?.stop();
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- unset if before() failed
    await cp?.stop();
  });

  async function leases(): Promise<Lease[]> {
    const r = await cp.kubectl(['get', 'leases', '-n', NAMESPACE, '-o', 'json']);
    assert.equal(r.code, 0, r.stderr);
    return (JSON.parse(r.stdout) as { items: Lease[] }).items;
  }

  async function leaseOf(name: string): Promise<Lease | undefined> {
    return (await leases()).find((l) => l.metadata.name === name);
  }

  async function startServer(h: Harness, dir: string, id: string, port: number): Promise<Server> {
    // prettier-ignore
    const proc = startProcess(h, SERVER_BIN, [
      '--kube-config', cp.adminKubeconfig,
      '--cert-dir', join(dir, `${id}-pki`),
      '--cert-ips', '127.0.0.1',
      '--bind-address', '127.0.0.1',
      '--tunnel-agent-connect-port', String(port),
      '--interceptor-proxier-uds', join(dir, `${id}.sock`),
      '--secure-port', '0', '--insecure-port', '0', '--meta-port', '0',
      '--enable-iptables=false', '--enable-dns-controller=false', '--enable-csr-approver=false',
      '--server-id', id,
      // Each says it is alone: only the Leases tell the agent of the others.
      '--server-count', '1',
      '--enable-lease-controller',
      '--lease-duration', '3s', '--lease-renew-interval', '500ms', '--lease-gc-interval', '500ms',
      '--startup-rehearsal=false',
      '--v', '2',
    ]);
    const started = await proc.waitForLine(/yurt-tunnel-server started/, 60_000);
    const metaPort = Number(/metaPort=(\d+)/.exec(started)?.[1]);
    assert.ok(metaPort > 0, started);
    return { id, port, proc, metaPort };
  }

  async function holds(s: Server, node: string): Promise<boolean> {
    try {
      return (await fetchAgents(`127.0.0.1:${s.metaPort}`, 2000)).some((a) => a.agentID === node);
    } catch {
      return false;
    }
  }

  test('Leases as upstream writes them; GC of expired ones; the agent counts two, three, then two servers', { timeout: 180_000 }, async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const ports = [await freeLowPort(), await freeLowPort(), await freeLowPort()];
    const [a, b] = await Promise.all([startServer(h, dir, 'server-a', ports[0]!), startServer(h, dir, 'server-b', ports[1]!)]);

    // Field for field: name, namespace, labels, holder, duration; renewTime moves on.
    // The server writes its Lease after it says it started: wait for it, as an agent would.
    await waitFor('server-a to publish its Lease', async () => (await leaseOf('konnectivity-proxy-server-server-a')) !== undefined, 15_000);
    const first = await leaseOf('konnectivity-proxy-server-server-a');
    assert.ok(first !== undefined, 'server-a published its Lease');
    assert.equal(first.metadata.namespace, NAMESPACE);
    assert.deepEqual(first.metadata.labels, { 'k8s-app': 'konnectivity-server' });
    assert.equal(first.spec.holderIdentity, 'server-a');
    assert.equal(first.spec.leaseDurationSeconds, 3);
    assert.match(first.spec.renewTime ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/, 'a MicroTime');
    await waitFor(
      'server-a to renew its Lease',
      async () => (await leaseOf('konnectivity-proxy-server-server-a'))?.spec.renewTime !== first.spec.renewTime,
      5000,
    );

    // Another server's Lease that expired an hour ago: deleted; an expired Lease without the label: left alone.
    const stale = new Date(Date.now() - 3_600_000).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
    for (const [name, labels] of [
      ['konnectivity-proxy-server-gone', { 'k8s-app': 'konnectivity-server' }],
      ['someone-elses-lease', { app: 'other' }],
    ] as const) {
      await cp.apply({
        apiVersion: 'coordination.k8s.io/v1',
        kind: 'Lease',
        metadata: { name, namespace: NAMESPACE, labels },
        spec: { holderIdentity: 'gone', leaseDurationSeconds: 30, renewTime: stale },
      });
    }
    await waitFor('the GC to delete the expired server Lease', async () => (await leaseOf('konnectivity-proxy-server-gone')) === undefined, 10_000);
    assert.ok((await leaseOf('someone-elses-lease')) !== undefined, 'a Lease without the label is not ours to delete');

    // The agent, with the kubelet's identity, counts the Leases: two servers although each announces one.
    // prettier-ignore
    const agent = startProcess(h, AGENT_BIN, [
      '--node-name', 'edge-1', '--node-ip', '127.0.0.1',
      '--kube-config', await kubeletKubeconfig(cp, 'edge-1'),
      '--cert-dir', join(dir, 'agent-pki'),
      '--tunnelserver-addr', ports.map((p) => `127.0.0.1:${p}`).join(','),
      '--count-server-leases', '--lease-namespace', NAMESPACE, '--lease-label-selector', LABEL,
      '--sync-interval', '200ms', '--sync-interval-cap', '1s',
      // No probes: only the count makes it dial past the first server.
      '--server-probe-interval', '0',
      '--meta-port', '0', '--startup-rehearsal=false', '--v', '2',
    ]);
    await waitFor('the agent on server-a and server-b', async () => (await holds(a, 'edge-1')) && (await holds(b, 'edge-1')), 60_000);
    await agent.waitForLine(/server count changed.*serverCount=2/);

    // A third server: its Lease raises the count and the agent links to it too.
    const c = await startServer(h, dir, 'server-c', ports[2]!);
    await waitFor('the agent on server-c', () => holds(c, 'edge-1'), 30_000);
    await agent.waitForLine(/server count changed.*serverCount=3/);

    // Killed with -9, server-c leaves its Lease behind; once it expires the count drops, and the GC removes it.
    c.proc.kill('SIGKILL');
    await c.proc.exited;
    assert.ok((await leaseOf('konnectivity-proxy-server-server-c')) !== undefined, 'a killed server cannot delete its Lease');
    const rise = agent.lines.findIndex((l) => /server count changed.*serverCount=3/.test(l));
    await waitFor('the count to drop back to 2', () => agent.lines.slice(rise + 1).some((l) => /server count changed.*serverCount=2/.test(l)), 10_000);
    await waitFor("the GC to delete server-c's expired Lease", async () => (await leaseOf('konnectivity-proxy-server-server-c')) === undefined, 10_000);

    // SIGTERM: a server deletes its own Lease on the way out.
    b.proc.kill('SIGTERM');
    await b.proc.exited;
    assert.equal(await leaseOf('konnectivity-proxy-server-server-b'), undefined, 'server-b deleted its Lease');
    await cp.kubectl(['delete', 'lease', '-n', NAMESPACE, 'someone-elses-lease']);
  });
});
