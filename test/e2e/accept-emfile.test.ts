// A server out of file descriptors says so, once per listener per interval,
// and keeps serving: the real server binary under a low descriptor limit
// (prlimit), exhausted by callers that hold connections to a master port.

import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROBE_INTERVAL_MS } from '../../pkg/net/accept-failures.js';
import { localServerFlags } from '../../hack/local-tunnel.js';
import { harness } from '../support/harness.js';
import { SERVER_BIN, startProcess } from '../support/processes.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };
/** The server's descriptor limit: it starts with about 30 open. */
const DESCRIPTOR_LIMIT = 128;

const LISTENERS = ['agent port', 'proxier CONNECT socket', 'egress gRPC socket', 'secure master port', 'insecure master port', 'meta port'];

function healthz(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/healthz', agent: false, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy(new Error('no answer in 2 s')));
    req.on('error', reject);
    req.end();
  });
}

test('out of file descriptors: one error line per listener naming EMFILE, the process lives, and serves again once they are freed', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const server = startProcess(
    h,
    SERVER_BIN,
    [
      ...localServerFlags({ certDir: join(dir, 'pki'), udsPath: join(dir, 'proxier.sock') }),
      ...['--egress-selector-enable', '--egress-selector-uds', join(dir, 'egress.sock'), '--egress-selector-mode', 'grpc'],
      // Long enough for the callers that exhaust it to hold their connections.
      ...['--request-head-timeout', '60s'],
    ],
    {},
    { prefix: ['prlimit', `--nofile=${DESCRIPTOR_LIMIT}:${DESCRIPTOR_LIMIT}`] },
  );
  const started = await server.waitForLine(/yurt-tunnel-server started/);
  const insecurePort = Number(/insecurePort=(\d+)/.exec(started)![1]);
  const metaPort = Number(/metaPort=(\d+)/.exec(started)![1]);
  assert.equal(await healthz(metaPort), 200);
  const emfileLines = (): string[] => server.lines.filter((l) => l.includes('out of file descriptors (EMFILE)'));
  assert.deepEqual(emfileLines(), []);

  // Silent callers on the insecure master port, each holding a descriptor there, until the server has none left.
  const held: Socket[] = [];
  h.defer(() => held.forEach((s) => s.destroy()));
  for (let i = 0; i < DESCRIPTOR_LIMIT + 20; i++) {
    const s = connect(insecurePort, '127.0.0.1');
    s.on('error', () => {});
    held.push(s);
  }
  const first = await server.waitForLine(/cannot accept connections: out of file descriptors \(EMFILE\)/, 5000);
  assert.match(first, /^E\d{4} /, 'an error line');
  assert.match(first, /raise the limit \(ulimit -n \/ LimitNOFILE\)/);
  assert.match(first, new RegExp(`descriptorLimit=${DESCRIPTOR_LIMIT}`));
  // While it lasts: /healthz cannot be answered (libuv accepts and closes the connection), and the probe goes on.
  await assert.rejects(healthz(metaPort));
  await sleep(3 * PROBE_INTERVAL_MS);
  const lines = emfileLines();
  for (const name of LISTENERS) {
    assert.equal(lines.filter((l) => l.includes(`the ${name} cannot accept connections`)).length, 1, `one line for the ${name} in:\n${lines.join('\n')}`);
  }
  assert.equal(lines.length, LISTENERS.length);
  assert.equal(server.child.exitCode, null, 'the server is still running');

  // Descriptors freed: it serves again.
  for (const s of held.splice(0)) s.destroy();
  await waitFor(
    '/healthz to answer again',
    () =>
      healthz(metaPort).then(
        (status) => status === 200,
        () => false,
      ),
    10_000,
  );
  assert.equal(server.child.exitCode, null);
});
