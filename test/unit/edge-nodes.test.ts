import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { V1Node } from '@kubernetes/client-node';
import { edgeNodeTest } from '../../pkg/kube/edge-nodes.js';

function node(name: string, edge: string | undefined, addresses: string[]): V1Node {
  return {
    metadata: { name, labels: edge === undefined ? {} : { 'openyurt.io/is-edge-worker': edge } },
    status: { addresses: addresses.map((address, i) => ({ type: i === 0 ? 'InternalIP' : 'Hostname', address })) },
  };
}

function store(nodes: V1Node[], synced = true): { get(k: string): V1Node | undefined; list(): V1Node[]; synced(): boolean } {
  const byName = new Map(nodes.map((n) => [n.metadata!.name!, n]));
  return { get: (k) => byName.get(k), list: () => [...byName.values()], synced: () => synced };
}

test('edge nodes by name or any address; cloud nodes, unlabelled ones and unknown hosts are not', () => {
  const isEdge = edgeNodeTest(
    store([node('edge-1', 'true', ['10.0.0.1', 'edge-1.local']), node('cloud-1', 'false', ['10.0.1.1']), node('plain', undefined, ['10.0.2.1'])]),
  );
  assert.equal(isEdge('edge-1'), true);
  assert.equal(isEdge('10.0.0.1'), true);
  assert.equal(isEdge('edge-1.local'), true);
  assert.equal(isEdge('cloud-1'), false);
  assert.equal(isEdge('10.0.1.1'), false);
  assert.equal(isEdge('plain'), false);
  assert.equal(isEdge('10.96.0.10'), false, 'a Service address');
  assert.equal(isEdge('EDGE-1'), true, 'host names compare without case, as DNS names do');
  assert.equal(isEdge('Edge-1.Local'), true);
});

test('before the first list every host counts as an edge node (nothing is dialled directly)', () => {
  const isEdge = edgeNodeTest(store([node('cloud-1', 'false', ['10.0.1.1'])], false));
  assert.equal(isEdge('10.0.1.1'), true);
  assert.equal(isEdge('10.96.0.10'), true);
});
