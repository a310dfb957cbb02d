// An accept error Node does report (a listening net.Server's 'error': libuv
// had no reserve descriptor left to shed the connections with) is one
// rate-limited error line naming the listener and the cause, and the listener
// keeps accepting. The error is emitted here as Node's onconnection emits it:
// libuv reports it only when its own reserve is gone, which a test cannot
// arrange. (Descriptors really running out: test/e2e/accept-emfile.test.ts.)

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { listen, stopListening } from '../../pkg/net/listen.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';

function acceptError(code: string): Error {
  return Object.assign(new Error(`accept ${code}`), { code, errno: -24, syscall: 'accept' });
}

test('accept errors a listener emits are logged once per kind and interval, and it goes on accepting', { timeout: 10_000 }, async (t) => {
  const h = harness(t);
  const log = new MemoryLogger(0);
  const accepted: Socket[] = [];
  const server = createServer((s) => accepted.push(s));
  await listen(server, { port: 0, host: '127.0.0.1' }, { name: 'test port', logger: log });
  h.defer(() => stopListening(server));
  h.defer(() => accepted.forEach((s) => s.destroy()));

  for (let i = 0; i < 3; i++) server.emit('error', acceptError('EMFILE'));
  server.emit('error', acceptError('ENOBUFS'));
  const lines = log.records.map((r) => [r.level, r.message]);
  assert.deepEqual(lines, [
    ['error', 'the test port cannot accept connections: out of file descriptors (EMFILE): raise the limit (ulimit -n / LimitNOFILE)'],
    ['error', 'the test port failed to accept a connection'],
  ]);
  assert.match(String(log.records[0]!.fields.address), /^127\.0\.0\.1:\d+$/);
  assert.equal(log.records[1]!.fields.error, 'accept ENOBUFS');

  const port = (server.address() as { port: number }).port;
  const client = connect(port, '127.0.0.1');
  h.defer(() => client.destroy());
  await once(client, 'connect');
  assert.ok(server.listening);
});
