// The HTTP proxy's reading of an absolute-URI request target.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HttpError } from '../../pkg/interceptor/errors.js';
import { absoluteTarget } from '../../pkg/interceptor/http-proxy.js';

test('an absolute http URI gives the destination, the Host to send and the origin-form target', () => {
  assert.deepEqual(absoluteTarget('http://edge-1:9100/metrics?a=b'), { address: 'edge-1:9100', host: 'edge-1:9100', path: '/metrics?a=b' });
  assert.deepEqual(absoluteTarget('http://edge-1'), { address: 'edge-1:80', host: 'edge-1', path: '/' });
  assert.deepEqual(absoluteTarget('HTTP://[fd00::1]:9100?x'), { address: '[fd00::1]:9100', host: '[fd00::1]:9100', path: '/?x' });
});

test('anything else is a 400 saying what to do', () => {
  for (const [url, reason] of [
    ['/metrics', /is not an absolute http:\/\/ URI: this port is an HTTP proxy/],
    ['https://edge-1:10250/metrics', /for an https target use CONNECT/],
    ['http://user@edge-1:9100/', /is not an absolute http:\/\/ URI/],
    ['http://edge-1:99999/', /is not host\[:port\]/],
  ] as const) {
    const r = absoluteTarget(url);
    assert.ok(r instanceof HttpError, url);
    assert.equal(r.status, 400);
    assert.match(r.message, reason);
  }
});
