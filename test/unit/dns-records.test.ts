import assert from 'node:assert/strict';
import { test } from 'node:test';
import { hostsText, nodeRecord, recordKey } from '../../pkg/dns/records.js';
import { planServicePorts } from '../../pkg/dns/service-ports.js';
import type { V1Node, V1ServicePort } from '../../pkg/kube/types.js';

function node(name: string, addresses: [string, string][], edge?: boolean): V1Node {
  return {
    metadata: { name, labels: edge === undefined ? {} : { 'openyurt.io/is-edge-worker': String(edge) } },
    status: { addresses: addresses.map(([type, address]) => ({ type, address })) },
  };
}

test('edge nodes resolve to the tunnel ClusterIP, others to their InternalIP, else ExternalIP; a node with neither is skipped', () => {
  const records = [
    node('edge-n1', [['InternalIP', '192.168.1.5']], true),
    node(
      'n1',
      [
        ['Hostname', 'n1'],
        ['ExternalIP', '203.0.113.9'],
        ['InternalIP', '10.0.0.1'],
      ],
      false,
    ),
    node('cloud-2', [['ExternalIP', '203.0.113.10']]),
    node('bare', [['Hostname', 'bare']]),
  ].map((n) => nodeRecord(n, '10.96.0.50'));
  assert.deepEqual(records, [
    { name: 'edge-n1', ip: '10.96.0.50' },
    { name: 'n1', ip: '10.0.0.1' },
    { name: 'cloud-2', ip: '203.0.113.10' },
    { name: 'bare', skipped: 'it has neither an InternalIP nor an ExternalIP address' },
  ]);
  assert.equal(hostsText(records), '10.0.0.1\tn1\n10.96.0.50\tedge-n1\n203.0.113.10\tcloud-2');
});

test('without the internal Service an edge node is skipped, saying why', () => {
  const r = nodeRecord(node('edge-1', [['InternalIP', '192.168.1.5']], true), undefined);
  assert.ok('skipped' in r);
  assert.match(r.skipped, /x-tunnel-server-internal-svc has no ClusterIP/);
});

test('a record changes when the label or the address does, not otherwise', () => {
  const a = node('n1', [['InternalIP', '10.0.0.1']]);
  const key = (n: V1Node): string => recordKey(nodeRecord(n, '10.96.0.50'));
  assert.equal(
    key(a),
    key(
      node('n1', [
        ['InternalIP', '10.0.0.1'],
        ['Hostname', 'n1'],
      ]),
    ),
  );
  assert.notEqual(key(a), key(node('n1', [['InternalIP', '10.0.0.2']])));
  assert.notEqual(key(a), key(node('n1', [['InternalIP', '10.0.0.1']], true)));
});

const base: V1ServicePort[] = [
  { name: 'https', protocol: 'TCP', port: 10250, targetPort: 10263 },
  { name: 'http', protocol: 'TCP', port: 10255, targetPort: 10264 },
];
const master = { secure: 10263, insecure: 10264 };

test('dnat ports: added per proxy port, targetPort by kind; others kept; unconfigured dnat TCP ports dropped; UDP ones kept', () => {
  const current: V1ServicePort[] = [
    ...base,
    { name: 'dnat-7000', protocol: 'TCP', port: 7000, targetPort: 10264 },
    { name: 'dnat-53', protocol: 'UDP', port: 53, targetPort: 53 },
  ];
  const plan = planServicePorts(
    current,
    new Map([
      [9100, 'insecure'],
      [9443, 'secure'],
    ]),
    master,
  );
  assert.deepEqual(plan.ports, [
    ...base,
    { name: 'dnat-53', protocol: 'UDP', port: 53, targetPort: 53 },
    { name: 'dnat-9100', protocol: 'TCP', port: 9100, targetPort: 10264 },
    { name: 'dnat-9443', protocol: 'TCP', port: 9443, targetPort: 10263 },
  ]);
  assert.deepEqual(plan.conflicts, []);
});

test('dnat ports: nothing to write when they match, a changed targetPort is fixed, a taken port is a conflict', () => {
  const current: V1ServicePort[] = [...base, { name: 'dnat-9100', protocol: 'TCP', port: 9100, targetPort: 10264 }];
  assert.equal(planServicePorts(current, new Map([[9100, 'insecure']]), master).ports, undefined);
  assert.deepEqual(planServicePorts(current, new Map([[9100, 'secure']]), master).ports, [
    ...base,
    { name: 'dnat-9100', protocol: 'TCP', port: 9100, targetPort: 10263 },
  ]);
  const taken = planServicePorts(base, new Map([[10255, 'secure']]), master);
  assert.equal(taken.ports, undefined);
  assert.deepEqual(taken.conflicts, ['port 10255 is already the Service\'s port "http"']);
  assert.deepEqual(planServicePorts(current, new Map(), master).ports, base);
});
