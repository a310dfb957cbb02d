// The CSR approver against a real kube-apiserver and kube-controller-manager:
// an agent's CSR made with its node's credentials for itself is approved and
// signed; the server's, made by its ServiceAccount (with the manifests' RBAC),
// too, with no one approving by hand. Forgeries stay pending with one logged
// reason each: a node asking for another node's certificate, extra DNS or IP
// names, other usages, an unrelated user, the server's certificates asked by
// someone other than its ServiceAccount, a serving CSR of the server's own
// ServiceAccount naming what the server does not (a node's address, another
// Service's name).

import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startClusterCertificate } from '../../pkg/agent/cluster-certificate.js';
import { CLIENT_USAGES, KUBE_APISERVER_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, SERVING_USAGES, type KeyUsage } from '../../pkg/certs/certificate-manager.js';
import { AGENT_COMMON_NAME, PROXY_CLIENT_COMMON_NAME, SERVER_COMMON_NAME, SERVER_ORGANIZATION, YURTTUNNEL_ORGANIZATION } from '../../pkg/certs/local-store.js';
import { createSigningRequest, type SigningRequest } from '../../pkg/certs/pki.js';
import { createKubeClient } from '../../pkg/kube/client.js';
import { APPROVED_REASON, CsrApprover } from '../../pkg/kube/csr-approver.js';
import { ClusterServices } from '../../pkg/server/cluster.js';
import { kubeletKubeconfig } from '../support/cluster.js';
import { controlPlaneSkipReason, listCSRs, putNode, startControlPlane, type ControlPlane } from '../support/envtest/index.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const skip = controlPlaneSkipReason();
const SERVER_SA = 'system:serviceaccount:kube-system:yurt-tunnel-server';
const NODE_GROUPS = ['system:nodes', 'system:authenticated'];
const SERVER_SA_GROUPS = ['system:serviceaccounts', 'system:serviceaccounts:kube-system', 'system:authenticated'];

interface Csr {
  name: string;
  as: { user: string; groups: string[] };
  req: SigningRequest;
  signerName: string;
  usages: readonly KeyUsage[];
}

/** Creates a CSR as `as` (the administrator impersonating that user and groups). */
function createCsrAs(cp: ControlPlane, csr: Csr): Promise<void> {
  const body = JSON.stringify({
    apiVersion: 'certificates.k8s.io/v1',
    kind: 'CertificateSigningRequest',
    metadata: { name: csr.name },
    spec: { request: Buffer.from(createSigningRequest(csr.req).csr).toString('base64'), signerName: csr.signerName, usages: csr.usages },
  });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port: cp.port,
        method: 'POST',
        path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
        ca: cp.pki.ca.cert,
        cert: cp.pki.admin.cert,
        key: cp.pki.admin.key,
        agent: false,
        headers: { 'content-type': 'application/json', 'impersonate-user': csr.as.user, 'impersonate-group': csr.as.groups },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (text += c));
        res.on('end', () => (res.statusCode === 201 ? resolve() : reject(new Error(`creating CSR ${csr.name} as ${csr.as.user}: ${res.statusCode} ${text}`))));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const agentCsr = (name: string, node: string, req: Partial<SigningRequest> = {}, usages: readonly KeyUsage[] = CLIENT_USAGES): Csr => ({
  name,
  as: { user: `system:node:${node}`, groups: NODE_GROUPS },
  req: { commonName: AGENT_COMMON_NAME, organizations: [YURTTUNNEL_ORGANIZATION], dnsNames: [node], ips: ['127.0.0.11'], ...req },
  signerName: KUBE_APISERVER_CLIENT_SIGNER,
  usages,
});

const servingCsr = (name: string, names: Pick<SigningRequest, 'dnsNames' | 'ips'>): Csr => ({
  name,
  as: { user: SERVER_SA, groups: SERVER_SA_GROUPS },
  req: { commonName: SERVER_COMMON_NAME, organizations: [SERVER_ORGANIZATION], ...names },
  signerName: KUBELET_SERVING_SIGNER,
  usages: SERVING_USAGES,
});

describe('the CSR approver with a real kube-apiserver', { skip }, () => {
  let cp: ControlPlane;
  let approver: CsrApprover | undefined;
  /** What the test's approver takes for the server's serving names (in the server, its certificate template's). */
  let serverNames = { ips: ['127.0.0.1', '::1'], dnsNames: ['x-tunnel-server-svc'] };
  const log = new MemoryLogger(2);

  const conditions = async (name: string): Promise<{ type: string; reason?: string }[]> =>
    (await listCSRs(cp)).find((c) => c.metadata.name === name)?.status?.conditions ?? [];
  const leftPending = (name: string): { reason: string }[] =>
    log.records.filter((r) => r.message === 'CSR left pending' && r.fields.csr === name).map((r) => ({ reason: String(r.fields.reason) }));
  const approvedByUs = async (name: string): Promise<boolean> => (await conditions(name)).some((c) => c.type === 'Approved' && c.reason === APPROVED_REASON);

  before(async () => {
    cp = await startControlPlane({ controllerManager: true });
    await putNode(cp, 'node-a', { internalIP: '127.0.0.11', kubeletPort: 10250 });
    await putNode(cp, 'node-b', { internalIP: '127.0.0.12', kubeletPort: 10250 });
    // Anyone may create CSRs here, so that the approver is what stands between a user and a certificate.
    await cp.apply({
      apiVersion: 'v1',
      kind: 'List',
      items: [
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRole',
          metadata: { name: 'csr-creator' },
          rules: [{ apiGroups: ['certificates.k8s.io'], resources: ['certificatesigningrequests'], verbs: ['create', 'get', 'list', 'watch'] }],
        },
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'ClusterRoleBinding',
          metadata: { name: 'csr-creator' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'csr-creator' },
          subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: 'system:authenticated' }],
        },
      ],
    });
    approver = new CsrApprover({
      client: createKubeClient({ kind: 'kubeconfig', path: cp.adminKubeconfig }),
      serverServiceAccount: 'yurt-tunnel-server',
      servingNames: () => Promise.resolve(serverNames),
      logLimit: { burst: 100 },
      logger: log,
    });
    approver.start();
  });
  after(async () => {
    await approver?.stop();
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- unset if before() failed
    await cp?.stop();
  });

  test("an agent's CSR made with its node's credentials for itself is approved and signed", async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const agentLog = new MemoryLogger(2);
    const { manager } = await startClusterCertificate({
      source: { kind: 'kubeconfig', path: await kubeletKubeconfig(cp, 'node-a') },
      certDir: join(dir, 'agent-pki'),
      nodeName: 'node-a',
      nodeIPs: ['127.0.0.11'],
      csrPollMs: 200,
      logger: agentLog,
    });
    h.defer(() => manager.stop());
    await waitFor('the agent certificate to be issued', () => manager.current() !== undefined, 20_000);
    const pair = manager.current()!;
    const cert = new X509Certificate(pair.cert);
    assert.ok(cert.checkIssued(new X509Certificate(cp.pki.ca.cert)), 'signed by the cluster CA');
    assert.match(cert.subjectAltName ?? '', /DNS:node-a/);
    const ours = (await listCSRs(cp)).filter((c) => c.spec.username === 'system:node:node-a');
    assert.equal(ours.length, 1);
    assert.ok(await approvedByUs(ours[0]!.metadata.name), 'approved by the approver, with its reason');
    assert.equal(log.find('CSR approved').length >= 1, true);
  });

  test('forgeries stay pending, each with one logged reason', async () => {
    const forgeries: { csr: Csr; reason: RegExp }[] = [
      {
        csr: agentCsr('forged-other-node', 'node-a', { dnsNames: ['node-b'], ips: ['127.0.0.12'] }),
        reason: /requested by node node-a but names DNS node-b, want exactly node-a/,
      },
      {
        csr: agentCsr('forged-extra-dns', 'node-a', { dnsNames: ['node-a', 'kubernetes.default'] }),
        reason: /names DNS node-a,kubernetes\.default, want exactly node-a/,
      },
      { csr: agentCsr('forged-extra-ip', 'node-a', { ips: ['127.0.0.11', '127.0.0.12'] }), reason: /names IP 127\.0\.0\.12, not an address of that node/ },
      {
        csr: agentCsr('forged-usages', 'node-a', {}, [...CLIENT_USAGES, 'server auth']),
        reason: /usages digital signature,key encipherment,client auth,server auth, want exactly/,
      },
      {
        csr: { ...agentCsr('forged-unrelated-user', 'node-a'), as: { user: 'mallory', groups: ['system:authenticated'] } },
        reason: /requested by mallory \(groups system:authenticated\), not by a node/,
      },
      {
        csr: { ...agentCsr('forged-node-group-missing', 'node-a'), as: { user: 'system:node:node-a', groups: ['system:authenticated'] } },
        reason: /not by a node/,
      },
      {
        csr: {
          name: 'forged-server-serving',
          as: { user: 'system:node:node-a', groups: NODE_GROUPS },
          req: { commonName: SERVER_COMMON_NAME, organizations: [SERVER_ORGANIZATION], dnsNames: ['x-tunnel-server-svc'], ips: ['127.0.0.11'] },
          signerName: KUBELET_SERVING_SIGNER,
          usages: SERVING_USAGES,
        },
        reason: /server serving CSR: requested by system:node:node-a, not by the server's ServiceAccount/,
      },
      {
        csr: {
          name: 'forged-server-proxy-client',
          as: { user: 'system:serviceaccount:kube-system:default', groups: ['system:serviceaccounts', 'system:serviceaccounts:kube-system'] },
          req: { commonName: PROXY_CLIENT_COMMON_NAME, organizations: [YURTTUNNEL_ORGANIZATION] },
          signerName: KUBE_APISERVER_CLIENT_SIGNER,
          usages: CLIENT_USAGES,
        },
        reason: /server proxy client CSR: requested by system:serviceaccount:kube-system:default, not by the server's ServiceAccount/,
      },
      {
        // A kubelet-serving certificate for node-a's name and address would pose as its kubelet to kube-apiserver.
        csr: servingCsr('forged-serving-node-address', { dnsNames: ['x-tunnel-server-svc', 'node-a'], ips: ['127.0.0.1', '127.0.0.11'] }),
        reason: /server serving CSR: names node-a,127\.0\.0\.11, not among the server's own serving names/,
      },
      {
        csr: servingCsr('forged-serving-other-service', { dnsNames: ['kubernetes.default.svc'], ips: [] }),
        reason: /server serving CSR: names kubernetes\.default\.svc, not among the server's own serving names/,
      },
    ];
    for (const f of forgeries) await createCsrAs(cp, f.csr);
    for (const f of forgeries) {
      await waitFor(`the reason ${f.csr.name} stays pending`, () => leftPending(f.csr.name).length > 0, 15_000);
      assert.match(leftPending(f.csr.name)[0]!.reason, f.reason, f.csr.name);
    }
    // A change to a forged CSR syncs it again, but its reason is not logged again. The worker syncs in order, so once
    // a genuine CSR created after the change is approved, the change has been seen.
    await cp.kubectl(['label', 'csr', 'forged-other-node', 'seen=again']);
    await createCsrAs(cp, agentCsr('genuine-after-label', 'node-b', { ips: ['127.0.0.12'] }));
    await waitFor('the genuine CSR to be approved', () => approvedByUs('genuine-after-label'), 15_000);
    for (const f of forgeries) {
      assert.deepEqual(await conditions(f.csr.name), [], `${f.csr.name} is still pending`);
      assert.equal(leftPending(f.csr.name).length, 1, `${f.csr.name}: one line`);
    }
  });

  test('a serving CSR naming what the approver has not seen yet passes once recheck() finds the name among the serving names', async () => {
    await createCsrAs(cp, servingCsr('serving-ahead', { dnsNames: ['x-tunnel-server-svc'], ips: ['127.0.0.1', '127.0.0.42'] }));
    await waitFor('serving-ahead to be left pending', () => leftPending('serving-ahead').length > 0, 15_000);
    assert.match(leftPending('serving-ahead')[0]!.reason, /names 127\.0\.0\.42, not among/);
    // Another replica's informers were ahead: this one's catch up (a cloud node 127.0.0.42) and its server rechecks.
    serverNames = { ...serverNames, ips: [...serverNames.ips, '127.0.0.42'] };
    approver!.recheck();
    await waitFor('serving-ahead to be approved', () => approvedByUs('serving-ahead'), 15_000);
    assert.deepEqual(await conditions('forged-serving-node-address'), [], 'the forgery is still pending');
  });

  test("a review waiting for the server's names ends at its deadline: the CSRs behind it are still approved", async () => {
    // The server's informers never sync (say, its RBAC is missing): its serving CSR must not hold up the agents'.
    await approver?.stop();
    approver = new CsrApprover({
      client: createKubeClient({ kind: 'kubeconfig', path: cp.adminKubeconfig }),
      serverServiceAccount: 'yurt-tunnel-server',
      servingNames: () => new Promise(() => {}),
      syncTimeoutMs: 300,
      logLimit: { burst: 100 },
      logger: log,
    });
    approver.start();
    await createCsrAs(cp, servingCsr('serving-names-unknown', { dnsNames: ['x-tunnel-server-svc'], ips: [] }));
    await createCsrAs(cp, agentCsr('agent-behind-unknown-names', 'node-a'));
    await waitFor('the agent CSR behind it to be approved', () => approvedByUs('agent-behind-unknown-names'), 15_000);
    assert.deepEqual(await conditions('serving-names-unknown'), [], 'the serving CSR stays pending');
  });

  test("the server's own CSRs, made by its ServiceAccount with the manifests' RBAC, are approved by its approver", async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    // Another approver holds the lease: let the server's own take it.
    await approver?.stop();
    approver = undefined;
    for (const file of ['server-rbac.yaml', 'services.yaml']) {
      const applied = await cp.kubectl(['apply', '-f', join(process.cwd(), 'manifests/base', file)]);
      assert.equal(applied.code, 0, applied.stderr);
    }
    // A cloud node: agents reach the NodePort Service on its address, so the serving certificate names it.
    assert.equal((await cp.kubectl(['label', 'node', 'node-b', 'openyurt.io/is-edge-worker=false'])).code, 0);
    const token = await cp.kubectl(['create', 'token', 'yurt-tunnel-server', '-n', 'kube-system']);
    assert.equal(token.code, 0, token.stderr);
    const kubeconfig = join(dir, 'server-sa.kubeconfig');
    await writeFile(
      kubeconfig,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{name: c, cluster: {server: "' + cp.url + '", certificate-authority-data: ' + Buffer.from(cp.pki.ca.cert).toString('base64') + '}}]',
        'users: [{name: sa, user: {token: ' + token.stdout.trim() + '}}]',
        'contexts: [{name: c, context: {cluster: c, user: sa}}]',
        'current-context: c',
        '',
      ].join('\n'),
    );
    const serverLog = new MemoryLogger(2);
    // What TunnelServer.start runs in cluster mode (the approver is on by default), without waiting for the certificates.
    const cluster = await ClusterServices.start({
      source: { kind: 'kubeconfig', path: kubeconfig },
      certDir: join(dir, 'server-pki'),
      certIPs: ['127.0.0.1'],
      certDNSNames: [],
      insecurePort: 10264,
      localhostProxyPorts: [],
      csrPollMs: 200,
      csrApprover: {},
      logger: serverLog,
    });
    h.defer(() => cluster.stop());
    await waitFor('the server certificates to be issued', () => cluster.serving.current() !== undefined && cluster.proxyClient.current() !== undefined, 20_000);
    // The first serving certificate may predate the informers' sync (loopback only); the next names everything.
    const sansOf = (pem: string): string[] => (new X509Certificate(pem).subjectAltName ?? '').split(', ');
    await waitFor('a serving certificate naming the cloud node', () => sansOf(cluster.serving.current()!.cert).includes('IP Address:127.0.0.12'), 20_000);
    const serving = new X509Certificate(cluster.serving.current()!.cert);
    assert.match(serving.subject, /CN=system:node:tunnel-server/);
    assert.ok(serving.checkIssued(new X509Certificate(cp.pki.ca.cert)));
    // Everything the server names is its own by the approver's rule: the cloud node, the Services' names, loopback.
    const sans = sansOf(serving.toString());
    for (const san of ['IP Address:127.0.0.12', 'DNS:x-tunnel-server-svc.kube-system.svc', 'DNS:x-tunnel-server-internal-svc', 'IP Address:127.0.0.1']) {
      assert.ok(sans.includes(san), `${san} in ${sans.join(', ')}`);
    }
    assert.ok(!sans.includes('IP Address:127.0.0.11'), 'not the edge node');
    const fromServer = (await listCSRs(cp)).filter((c) => c.spec.username === SERVER_SA && c.metadata.name.startsWith('yurttunnel-server'));
    assert.ok(fromServer.length >= 2, 'serving and proxy client');
    for (const c of fromServer) assert.ok(await approvedByUs(c.metadata.name), `${c.metadata.name} approved by the approver`);
    // The forgeries of the test before are still pending; the server's approver says so too.
    const refused = serverLog.find('CSR left pending').map((r) => String(r.fields.csr));
    assert.ok(refused.includes('forged-other-node'));
    // Its rule for serving names, with the names its own template computes: an edge node's address stays pending, a
    // request naming only the cloud node and a Service passes (the worker syncs in order: once it passes, the other was seen).
    await createCsrAs(cp, servingCsr('forged-serving-edge-node', { dnsNames: [], ips: ['127.0.0.11'] }));
    await createCsrAs(cp, servingCsr('serving-cloud-node', { dnsNames: ['x-tunnel-server-internal-svc.kube-system.svc'], ips: ['127.0.0.12'] }));
    await waitFor('serving-cloud-node to be approved', () => approvedByUs('serving-cloud-node'), 15_000);
    assert.deepEqual(await conditions('forged-serving-edge-node'), [], 'a serving CSR naming an edge node stays pending');
    assert.ok(!refused.some((name) => fromServer.some((c) => c.metadata.name === name)));
  });
});
