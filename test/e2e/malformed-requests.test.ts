// A request that used to end the whole server process: malformed
// percent-encoding in the pod path or in X-Forwarded-Uri threw out of the
// request handler. Each is now a 400 naming what was wrong, and the real
// server process keeps serving.

import assert from 'node:assert/strict';
import { request } from 'node:http';
import { join } from 'node:path';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { SERVER_BIN, startProcess } from '../support/processes.js';
import { closedPort, tempDir } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

function get(port: number, path: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('malformed percent-encoding in the path or X-Forwarded-Uri is a 400, and the server process lives on', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const server = startProcess(h, SERVER_BIN, [
    '--cert-dir', join(dir, 'pki'),
    '--bind-address', '127.0.0.1',
    '--tunnel-agent-connect-port', String(await closedPort()),
    '--interceptor-proxier-uds', join(dir, 'proxier.sock'),
    '--secure-port', '0',
    '--insecure-port', '0',
  ]);
  const started = await server.waitForLine(/yurt-tunnel-server started/);
  const port = Number(/insecurePort=(\d+)/.exec(started)![1]);

  const cases: Array<[string, Record<string, string>, RegExp]> = [
    ['/exec/%zz/pod?command=sh', { Host: '10.0.0.1:10250' }, /^the request path has a malformed percent-encoding in "%zz"/],
    ['/containerLogs/ns/%E0%A4%A/c', { Host: '10.0.0.1:10250' }, /^the request path has a malformed percent-encoding/],
    ['/healthz', { Host: '10.0.0.1:10250', 'X-Forwarded-Uri': '/api/v1/nodes/%zz/proxy/healthz' }, /^X-Forwarded-Uri has a malformed percent-encoding in "%zz"/],
  ];
  for (const [path, headers, body] of cases) {
    const res = await get(port, path, headers);
    assert.equal(res.status, 400, `${path}: ${res.body}`);
    assert.match(res.body, body);
  }
  // Still serving: a well-formed request for a node with no agent gets its 503.
  const ok = await get(port, '/healthz', { Host: '127.0.0.1:10250' });
  assert.equal(ok.status, 503, ok.body);
  assert.equal(server.child.exitCode, null, server.lines.join('\n'));
});
