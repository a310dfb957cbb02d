// The CONNECT proxier's client (demo, bench) writes OpenYurt's request.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { connectRequest } from '../../pkg/frontend/connect-client.js';

test('the CONNECT request is exactly OpenYurt\'s interceptor\'s, each optional header only when set', () => {
  assert.equal(connectRequest('10.0.0.5:10250'), 'CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: localhost\r\n\r\n');
  assert.equal(
    connectRequest('10.0.0.5:10250', 'edge-1', 'kube-apiserver/v1.24'),
    'CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: localhost\r\nX-Tunnel-Proxy-Host: edge-1\r\nUser-Agent: kube-apiserver/v1.24\r\n\r\n',
  );
  assert.equal(connectRequest('[fd00::1]:10250', undefined, 'ua'), 'CONNECT [fd00::1]:10250 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ua\r\n\r\n');
});
