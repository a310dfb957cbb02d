// pkg/kube against a real kube-apiserver (and kube-controller-manager for
// signing): informers, leader election, certificate signing requests.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { PatchStrategy, setHeaderOptions, type CoordinationV1Api, type V1Node } from '@kubernetes/client-node';
import { Informer } from '../../pkg/kube/informer.js';
import { isConflict } from '../../pkg/kube/errors.js';
import { retryOnConflict } from '../../pkg/kube/retry.js';
import { createSigningRequest } from '../../pkg/certs/pki.js';
import { describeCertificate } from '../../pkg/certs/read-certificate.js';
import { createKubeClient, type KubeClient } from '../../pkg/kube/client.js';
import { CsrSigner } from '../../pkg/kube/csr-signer.js';
import { CertificateRequestError } from '../../pkg/certs/errors.js';
import { nodeInformer } from '../../pkg/kube/node-resolver.js';
import { LeaderElector } from '../../pkg/kube/leader-election.js';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { harness } from '../support/harness.js';
import { kubeconfigYAML } from '../support/envtest/pki.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { waitFor } from '../support/tunnel.js';
import { controlPlaneSkipReason, deleteObject, listCSRs, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';

const skip = controlPlaneSkipReason();

/** `client`, counting its reads of Leases. */
function countingLeaseReads(client: KubeClient): { client: KubeClient; reads(): number } {
  let reads = 0;
  const coordination = Object.create(client.coordination) as CoordinationV1Api;
  coordination.readNamespacedLease = (...args: Parameters<CoordinationV1Api['readNamespacedLease']>) => {
    reads++;
    return client.coordination.readNamespacedLease(...args);
  };
  return { client: { ...client, coordination }, reads: () => reads };
}

/** The name of the CSR whose name starts with `prefix`, once there is one. */
async function csrNamed(cp: ControlPlane, prefix: string): Promise<string> {
  let name: string | undefined;
  await waitFor(`a CSR named ${prefix}*`, async () => {
    name = (await listCSRs(cp)).find((c) => c.metadata.name.startsWith(prefix))?.metadata.name;
    return name !== undefined;
  });
  return name!;
}

describe('pkg/kube against a real kube-apiserver', { skip }, () => {
  let cp: ControlPlane;
  let client: KubeClient;

  before(async () => {
    // Without the watch cache, watches read etcd, so a compaction makes an old version 410 Gone.
    cp = await startControlPlane({ controllerManager: true, apiserverArgs: ['--watch-cache=false'] });
    client = createKubeClient({ kind: 'kubeconfig', path: cp.adminKubeconfig });
  });
  after(async () => {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- unset if before() failed
    await cp?.stop();
  });

  test('a Node informer lists, then sees adds, updates and deletes; stop() ends its watch', async (t) => {
    const h = harness(t);
    await putNode(cp, 'informer-a', { internalIP: '127.0.0.2', kubeletPort: 10250 });
    const informer = nodeInformer(client, new MemoryLogger());
    h.defer(() => informer.stop());
    const events: string[] = [];
    informer.addHandler({
      add: (n: V1Node) => events.push(`add ${n.metadata?.name}`),
      update: (_o: V1Node, n: V1Node) => events.push(`update ${n.metadata?.name}`),
      delete: (n: V1Node) => events.push(`delete ${n.metadata?.name}`),
    });
    informer.start();
    await informer.waitForSync();
    assert.equal(informer.get('informer-a')?.status?.addresses?.[0]?.address, '127.0.0.2');
    assert.deepEqual(events, ['add informer-a']);

    await putNode(cp, 'informer-b', { internalIP: '127.0.0.3', kubeletPort: 10251 });
    await waitFor('the new node', () => informer.get('informer-b') !== undefined, 10_000);
    await putNode(cp, 'informer-a', { internalIP: '127.0.0.4', kubeletPort: 10250 });
    await waitFor('the changed address', () => informer.get('informer-a')?.status?.addresses?.[0]?.address === '127.0.0.4', 10_000);
    await deleteObject(cp, 'node', 'informer-b');
    await waitFor('the deletion', () => informer.get('informer-b') === undefined, 10_000);
    assert.ok(events.includes('add informer-b') && events.includes('update informer-a') && events.includes('delete informer-b'), events.join(', '));
    await deleteObject(cp, 'node', 'informer-a');
  });

  test('a watch from a resourceVersion the API server no longer keeps gets 410 Gone: the informer lists again and catches up', async (t) => {
    const h = harness(t);
    await putNode(cp, 'gone-a', { internalIP: '127.0.0.5', kubeletPort: 10250 });
    const oldVersion = (await client.core.listNode()).metadata?.resourceVersion;
    for (let i = 0; i < 5; i++) {
      await client.core.patchNode(
        { name: 'gone-a', body: { metadata: { labels: { round: String(i) } } } },
        setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
      );
    }
    await cp.compactEtcd();
    const log = new MemoryLogger(2);
    // The real client's watch, told to start the first watch from the stale version.
    let first = true;
    const realWatch = client.watch;
    const staleWatch = {
      config: realWatch.config,
      watch(
        path: string,
        query: Record<string, string | number | boolean | undefined>,
        cb: (type: string, obj: unknown) => void,
        done: (err: unknown) => void,
      ) {
        const q = first ? { ...query, resourceVersion: oldVersion } : query;
        first = false;
        return realWatch.watch(path, q, cb, done);
      },
    };
    const informer = new Informer<V1Node>({ name: 'nodes', list: (o) => client.core.listNode(o), watchPath: '/api/v1/nodes', watch: staleWatch, logger: log });
    h.defer(() => informer.stop());
    informer.start();
    await waitFor('a relist after 410', () => log.records.some((r) => r.message.includes('410 Gone')), 15_000);
    await putNode(cp, 'gone-b', { internalIP: '127.0.0.6', kubeletPort: 10250 });
    await waitFor('the informer to follow again', () => informer.get('gone-b') !== undefined, 15_000);
    assert.equal(informer.get('gone-a')?.metadata?.labels?.round, '4');
    await deleteObject(cp, 'node', 'gone-a');
    await deleteObject(cp, 'node', 'gone-b');
  });

  test('an informer whose API server is unreachable retries with a log line naming the address, and stops cleanly', async (t) => {
    const h = harness(t);
    const log = new MemoryLogger();
    // The same credentials, pointed at a closed port.
    const path = join(cp.dir, 'dead.kubeconfig');
    await writeFile(path, kubeconfigYAML('https://127.0.0.1:1', cp.pki.ca.cert, cp.pki.admin));
    const dead = createKubeClient({ kind: 'kubeconfig', path });
    const informer = nodeInformer(dead, log);
    h.defer(() => informer.stop());
    informer.start();
    await waitFor('a retry warning', () => log.records.some((r) => r.message.includes('cannot list/watch')), 10_000);
    const warning = log.records.find((r) => r.message.includes('cannot list/watch'))!;
    assert.match(String(warning.fields.error), /ECONNREFUSED|127\.0\.0\.1:1/);
    assert.equal(informer.synced(), false);
  });

  test('retryOnConflict: two writers of one ConfigMap from stale reads both land, the loser after a 409 and a fresh read', async (t) => {
    harness(t);
    const ns = 'kube-system';
    await client.core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name: 'retry-test' }, data: { count: '0' } } });
    let conflicts = 0;
    // Both writers' first reads happen before either writes: one of them must meet a 409.
    let firstReads = 0;
    let bothRead!: () => void;
    const bothHaveRead = new Promise<void>((resolve) => (bothRead = resolve));
    const increment = (): Promise<unknown> => {
      let attempts = 0;
      return retryOnConflict(async () => {
        const cm = await client.core.readNamespacedConfigMap({ namespace: ns, name: 'retry-test' });
        if (attempts++ === 0) {
          if (++firstReads === 2) bothRead();
          await bothHaveRead;
        }
        cm.data = { count: String(Number(cm.data?.count ?? '0') + 1) };
        try {
          return await client.core.replaceNamespacedConfigMap({ namespace: ns, name: 'retry-test', body: cm });
        } catch (err: unknown) {
          if (isConflict(err)) conflicts++;
          throw err;
        }
      });
    };
    await Promise.all([increment(), increment()]);
    const cm = await client.core.readNamespacedConfigMap({ namespace: ns, name: 'retry-test' });
    assert.equal(cm.data?.count, '2');
    assert.equal(conflicts, 1, 'the loser met one conflict and then wrote after a fresh read');
    await assert.rejects(
      retryOnConflict(() => Promise.reject(Object.assign(new Error('nope'), { code: 403 }))),
      /nope/,
      'other errors are not retried',
    );
  });

  test('leader election: one of two candidates leads; when it stops it releases the Lease and the other takes over at once', async (t) => {
    const h = harness(t);
    const log = new MemoryLogger();
    const leading: string[] = [];
    const elector = (id: string, through = client): LeaderElector =>
      new LeaderElector(through, {
        namespace: 'kube-system',
        name: 'tunnel-test-lease',
        identity: id,
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 200,
        onStartedLeading: () => leading.push(`+${id}`),
        onStoppedLeading: () => leading.push(`-${id}`),
        logger: log,
      });
    const counted = countingLeaseReads(client);
    const a = elector('replica-a');
    const b = elector('replica-b', counted.client);
    h.defer(() => a.stop());
    h.defer(() => b.stop());
    a.start();
    await waitFor('a to lead', () => a.isLeader(), 10_000);
    b.start();
    // Four whole attempts of b's (the fifth has begun), each finding the lease held.
    await waitFor('b to read the lease five times', () => counted.reads() >= 5, 10_000);
    assert.equal(b.isLeader(), false, 'the second candidate waits while the lease is held');
    assert.deepEqual(leading, ['+replica-a']);
    const handedOver = Date.now();
    await a.stop();
    await waitFor('b to lead', () => b.isLeader(), 5000);
    assert.ok(Date.now() - handedOver < 5000, 'released, not expired');
    assert.deepEqual(leading, ['+replica-a', '-replica-a', '+replica-b']);
    const lease = await client.coordination.readNamespacedLease({ namespace: 'kube-system', name: 'tunnel-test-lease' });
    assert.equal(lease.spec?.holderIdentity, 'replica-b');
    assert.equal(lease.spec.leaseTransitions, 1);
  });

  test('a leader stopped while its renewal is under way still releases the Lease (the renewal applied, its answer cut off)', async (t) => {
    const h = harness(t);
    const log = new MemoryLogger();
    // The next renewal is applied by the API server, then stop() begins and its answer never arrives:
    // the copy of the Lease the elector last saw is one version behind the API server's.
    let stopDuringRenewal: (() => void) | undefined;
    const coordination = Object.create(client.coordination) as CoordinationV1Api;
    coordination.replaceNamespacedLease = async (...args: Parameters<CoordinationV1Api['replaceNamespacedLease']>) => {
      const hook = stopDuringRenewal;
      if (hook === undefined || args[0].body.spec?.holderIdentity !== 'replica-a') return client.coordination.replaceNamespacedLease(...args);
      stopDuringRenewal = undefined;
      await client.coordination.replaceNamespacedLease(args[0]);
      hook();
      throw new Error('the answer to the renewal was cut off by stop()');
    };
    const a = new LeaderElector(
      { ...client, coordination },
      {
        namespace: 'kube-system',
        name: 'tunnel-test-lease-cut',
        identity: 'replica-a',
        retryPeriodMs: 100,
        onStartedLeading: () => {},
        onStoppedLeading: () => {},
        logger: log,
      },
    );
    h.defer(() => a.stop());
    a.start();
    await waitFor('a to lead', () => a.isLeader(), 10_000);
    let stopping: Promise<void> | undefined;
    stopDuringRenewal = () => {
      stopping = a.stop();
    };
    await waitFor('a renewal to be cut short by stop()', () => stopping !== undefined, 10_000);
    await stopping;
    assert.equal(a.isLeader(), false);
    const lease = await client.coordination.readNamespacedLease({ namespace: 'kube-system', name: 'tunnel-test-lease-cut' });
    assert.equal(lease.spec?.holderIdentity, '', 'released, so the next leader need not wait for it to expire');
    assert.ok(!log.records.some((r) => r.message.includes('could not release')), 'no failed release');
  });

  test('a CSR is created, waits for approval, and comes back signed by the cluster CA; a denied one fails with the reason', async (t) => {
    harness(t);
    const log = new MemoryLogger();
    const signer = new CsrSigner(client, { pollMs: 200, logger: log });
    const { csr } = createSigningRequest({
      commonName: 'tunnel-agent-client',
      organizations: ['openyurt:yurttunnel'],
      dnsNames: ['edge-9'],
      ips: ['127.0.0.9'],
    });
    const signed = signer.sign({
      namePrefix: 'kube-client-test-',
      csr,
      signerName: 'kubernetes.io/kube-apiserver-client',
      usages: ['digital signature', 'key encipherment', 'client auth'],
    });
    const name = await csrNamed(cp, 'kube-client-test-');
    assert.ok(log.records.some((r) => r.message.includes('waiting for it to be approved')));
    assert.equal((await cp.kubectl(['certificate', 'approve', name])).code, 0);
    const pem = await signed;
    const summary = describeCertificate(pem);
    assert.equal(summary.commonName, 'tunnel-agent-client');
    assert.deepEqual(summary.dnsNames, ['edge-9']);
    assert.deepEqual(summary.ips, ['127.0.0.9']);

    const denied = signer.sign({
      namePrefix: 'kube-client-deny-',
      csr,
      signerName: 'kubernetes.io/kube-apiserver-client',
      usages: ['digital signature', 'key encipherment', 'client auth'],
    });
    // The signer may see the denial before kubectl has exited: the rejection is expected before denying.
    const refused = assert.rejects(
      denied,
      (err: unknown) => err instanceof CertificateRequestError && err.code === 'YT_ERR_CSR_DENIED' && /was denied/.test((err as Error).message),
    );
    const deniedName = await csrNamed(cp, 'kube-client-deny-');
    assert.equal((await cp.kubectl(['certificate', 'deny', deniedName])).code, 0);
    await refused;
  });
});
