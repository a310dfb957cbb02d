import assert from 'node:assert/strict';
import { test } from 'node:test';
import { servingNames } from '../../pkg/kube/tunnel-addresses.js';
import type { V1Node, V1Service } from '../../pkg/kube/types.js';

const domains = (n: string): string[] => [n, `${n}.kube-system`, `${n}.kube-system.svc`, `${n}.kube-system.svc.cluster.local`];

function svc(name: string, spec: V1Service['spec'], extra: Partial<V1Service> = {}): V1Service {
  return { metadata: { name, namespace: 'kube-system', ...extra.metadata }, spec, ...(extra.status ? { status: extra.status } : {}) };
}

const cloud: V1Node = {
  metadata: { name: 'cloud-1', labels: { 'openyurt.io/is-edge-worker': 'false' } },
  status: {
    addresses: [
      { type: 'InternalIP', address: '10.0.0.10' },
      { type: 'Hostname', address: 'cloud-1' },
      { type: 'ExternalIP', address: '1.2.3.4' },
    ],
  },
};
const edge: V1Node = {
  metadata: { name: 'edge-1', labels: { 'openyurt.io/is-edge-worker': 'true' } },
  status: { addresses: [{ type: 'InternalIP', address: '192.168.1.5' }] },
};

test("without tunnel Services the serving certificate names loopback and the flags' names", () => {
  assert.deepEqual(servingNames([], [], { ips: ['203.0.113.7'], dnsNames: ['tunnel.example.com'] }), {
    ips: ['127.0.0.1', '::1', '203.0.113.7'],
    dnsNames: ['tunnel.example.com'],
    problems: [],
  });
});

test('a ClusterIP Service contributes its external-address annotation (port dropped), names and ClusterIP; the internal one its own', () => {
  const names = servingNames(
    [
      svc(
        'x-tunnel-server-svc',
        { type: 'ClusterIP', clusterIP: '10.96.0.20' },
        { metadata: { annotations: { 'x-tunnel-server-external-addr': 'tunnel.example.com:31008' } } },
      ),
      svc('x-tunnel-server-internal-svc', { type: 'ClusterIP', clusterIP: '10.96.0.21' }),
    ],
    [],
    { ips: [], dnsNames: [] },
  );
  assert.deepEqual(names.ips, ['10.96.0.20', '127.0.0.1', '::1', '10.96.0.21']);
  assert.deepEqual(names.dnsNames, ['tunnel.example.com', ...domains('x-tunnel-server-svc'), ...domains('x-tunnel-server-internal-svc')]);
});

test("a NodePort Service names the cloud nodes' InternalIPs and hostnames, never edge nodes", () => {
  const names = servingNames([svc('x-tunnel-server-svc', { type: 'NodePort', clusterIP: '10.96.0.20' })], [cloud, edge], { ips: [], dnsNames: [] });
  assert.deepEqual(names.ips, ['10.0.0.10', '10.96.0.20', '127.0.0.1', '::1']);
  assert.equal(names.dnsNames[0], 'cloud-1');
  assert.equal(names.ips.includes('192.168.1.5'), false);
});

test('a LoadBalancer without ingress yet is a reported problem, with ingress its addresses lead', () => {
  const pending = servingNames([svc('x-tunnel-server-svc', { type: 'LoadBalancer', clusterIP: '10.96.0.20' })], [], { ips: [], dnsNames: [] });
  assert.match(pending.problems[0] ?? '', /LoadBalancer without an ingress address/);
  const ready = servingNames(
    [
      svc(
        'x-tunnel-server-svc',
        { type: 'LoadBalancer', clusterIP: '10.96.0.20' },
        { status: { loadBalancer: { ingress: [{ ip: '198.51.100.9' }, { hostname: 'lb.example.net' }] } } },
      ),
    ],
    [],
    { ips: [], dnsNames: [] },
  );
  assert.deepEqual(ready.problems, []);
  assert.equal(ready.ips[0], '198.51.100.9');
  assert.equal(ready.dnsNames[0], 'lb.example.net');
});
