import assert from 'node:assert/strict';
import { test } from 'node:test';
import { clusterAvailable, loopbackFor } from '../../pkg/server/app.js';

test('the insecure master port defaults to the loopback of the bind address\'s family', () => {
  assert.equal(loopbackFor('0.0.0.0'), '127.0.0.1');
  assert.equal(loopbackFor('10.0.0.5'), '127.0.0.1');
  assert.equal(loopbackFor('::'), '::1');
  assert.equal(loopbackFor('fd00::5'), '::1');
});

test('a kubeconfig means a cluster; no kubeconfig and no pod environment means local mode', () => {
  assert.equal(clusterAvailable('/etc/kubernetes/admin.conf'), true);
  const saved = process.env.KUBERNETES_SERVICE_HOST;
  delete process.env.KUBERNETES_SERVICE_HOST;
  try {
    assert.equal(clusterAvailable(undefined), false);
    assert.equal(clusterAvailable(''), false);
  } finally {
    if (saved !== undefined) process.env.KUBERNETES_SERVICE_HOST = saved;
  }
});
