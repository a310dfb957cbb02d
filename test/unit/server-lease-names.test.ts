// Konnectivity's server Lease as both sides judge it: the name, the labels of
// --lease-label, and upstream's IsLeaseValid (renewTime, else acquireTime,
// plus the duration, after now; neither time means expired).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isLeaseValid, labelSelectorOf, parseLeaseLabels, serverLeaseName } from '../../pkg/kube/server-lease-names.js';

const LIMIT = { timeout: 10_000 };
const NOW = Date.parse('2026-11-29T12:00:00Z');

test('the Lease name and labels, as upstream', LIMIT, () => {
  assert.equal(serverLeaseName('3f1c'), 'konnectivity-proxy-server-3f1c');
  assert.deepEqual(parseLeaseLabels('k8s-app=konnectivity-server'), { 'k8s-app': 'konnectivity-server' });
  assert.deepEqual(parseLeaseLabels('a=1, example.com/b=x_y'), { a: '1', 'example.com/b': 'x_y' });
  assert.equal(labelSelectorOf({ a: '1', b: '' }), 'a=1,b=');
  for (const bad of ['', 'a', '=1', 'a=1,', 'a=b c', 'a=-x']) {
    assert.throws(() => parseLeaseLabels(bad), { name: 'TypeError', message: /^--lease-label: / }, bad);
  }
});

test('valid while renewTime (else acquireTime) plus the duration is after now', LIMIT, () => {
  const at = (s: number): string => new Date(NOW - s * 1000).toISOString();
  assert.equal(isLeaseValid({ renewTime: at(29), leaseDurationSeconds: 30 }, NOW), true);
  assert.equal(isLeaseValid({ renewTime: at(30), leaseDurationSeconds: 30 }, NOW), false, 'the end itself is expired');
  assert.equal(isLeaseValid({ renewTime: new Date(NOW - 1000), leaseDurationSeconds: 30 }, NOW), true, 'a Date as the typed list gives it');
  assert.equal(isLeaseValid({ acquireTime: at(10), leaseDurationSeconds: 30 }, NOW), true, 'acquireTime when never renewed');
  assert.equal(isLeaseValid({ renewTime: at(40), acquireTime: at(1), leaseDurationSeconds: 30 }, NOW), false, 'renewTime wins');
  assert.equal(isLeaseValid({ leaseDurationSeconds: 30 }, NOW), false, 'no time: expired');
  assert.equal(isLeaseValid({ renewTime: at(1) }, NOW), false, 'no duration: expired');
  assert.equal(isLeaseValid({ renewTime: 'not a time', leaseDurationSeconds: 30 }, NOW), false);
  assert.equal(isLeaseValid(undefined, NOW), false);
});
