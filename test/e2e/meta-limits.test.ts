// The meta ports of a real server and agent hold no descriptor for long: a
// request head has the head timeout (then 408, and closed even when the caller
// keeps its end open), and connections past the cap are closed at accept.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { metaGet } from '../support/meta-get.js';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { DEFAULT_META_MAX_CONNECTIONS, type MetaServer } from '../../pkg/meta/meta-server.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { startTestAgent } from '../support/cluster.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { testServerOptions } from '../support/server-options.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };
const HEAD_TIMEOUT_MS = 500;
const SLOW_CALLERS = 50;

interface SlowCaller {
  socket: Socket;
  /** What the meta port answered. */
  answer: string;
  /** Milliseconds from connecting to the close; undefined while open. */
  closedAfterMs: number | undefined;
}

/**
 * A caller that sends part of a request head, then one byte every 100 ms, and
 * never closes its end on its own (allowHalfOpen: a FIN from the server does not end it).
 */
function slowCaller(h: Harness, port: number): SlowCaller {
  const started = performance.now();
  const socket = connect({ host: '127.0.0.1', port, allowHalfOpen: true });
  const c: SlowCaller = { socket, answer: '', closedAfterMs: undefined };
  h.defer(() => socket.destroy());
  socket.on('error', () => {});
  socket.on('data', (d: Buffer) => (c.answer += d.toString('latin1')));
  socket.write('GET /metrics HTTP/1.1\r\nHost: meta\r\nX-Slow: ');
  const trickle = setInterval(() => {
    if (socket.writable) socket.write('a');
  }, 100);
  socket.once('close', () => {
    clearInterval(trickle);
    c.closedAfterMs = performance.now() - started;
  });
  return c;
}

async function closesSlowHeads(h: Harness, name: string, meta: MetaServer): Promise<void> {
  const port = meta.address.port;
  const callers = Array.from({ length: SLOW_CALLERS }, () => slowCaller(h, port));
  await waitFor(`${name}: the meta port to hold the slow callers`, () => meta.connectionCount === SLOW_CALLERS);
  // The head timeout, Node's check a tenth of it later, and at most 2 s for the caller to take the 408 (answerAndClose).
  await waitFor(`${name}: every slow caller closed by the meta port`, () => callers.every((c) => c.closedAfterMs !== undefined), HEAD_TIMEOUT_MS + 4000);
  for (const c of callers) {
    assert.ok(c.closedAfterMs! >= HEAD_TIMEOUT_MS, `${name}: closed after ${c.closedAfterMs} ms, before the head timeout`);
    assert.match(c.answer, /^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*no complete request head within 500 ms\n$/);
  }
  await waitFor(`${name}: the meta port's sockets all closed`, () => meta.connectionCount === 0, 1000);
  assert.deepEqual(await metaGet(port, '/healthz'), { status: 200, body: 'ok' });
}

test('server and agent meta ports close slow request heads at the head timeout, callers that keep their end open included', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const log = new MemoryLogger(2);
  const server = await TunnelServer.start(testServerOptions(dir, { metaPort: 0, requestHeadTimeoutMs: HEAD_TIMEOUT_MS, logger: log }));
  h.defer(() => server.stop());
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'edge-1', outDir: agentDir, nodeIPs: ['127.0.0.1'] });
  const agentLog = new MemoryLogger(2);
  const agent = await startTestAgent(h, server, { nodeName: 'edge-1', certDir: agentDir, metaPort: 0, metaHeadTimeoutMs: HEAD_TIMEOUT_MS, logger: agentLog });

  await Promise.all([closesSlowHeads(h, 'server', server.meta!), closesSlowHeads(h, 'agent', agent.meta!)]);
  // Rate-limited: a few lines of the kind, not one per caller.
  for (const l of [log, agentLog]) {
    const lines = l.find('meta port caller sent no complete request head in time; closed').length;
    assert.ok(lines >= 1 && lines <= 5, `${lines} head timeout lines`);
  }
});

test('a meta port takes at most its cap of connections: more are closed at accept, and /healthz answers again under it', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const log = new MemoryLogger(2);
  // A head timeout long enough for the silent connections to hold their places.
  const server = await TunnelServer.start(testServerOptions(dir, { metaPort: 0, requestHeadTimeoutMs: 30_000, logger: log }));
  h.defer(() => server.stop());
  const meta = server.meta!;
  const port = meta.address.port;
  assert.deepEqual(await metaGet(port, '/healthz'), { status: 200, body: 'ok' });

  const held: Socket[] = [];
  for (let i = 0; i < DEFAULT_META_MAX_CONNECTIONS; i++) {
    const s = connect(port, '127.0.0.1');
    h.defer(() => s.destroy());
    s.on('error', () => {});
    held.push(s);
  }
  await waitFor('the meta port to hold its cap of connections', () => meta.connectionCount === DEFAULT_META_MAX_CONNECTIONS);

  // One more: accepted by the kernel, then closed by the server before a byte is read.
  const extra = connect(port, '127.0.0.1');
  h.defer(() => extra.destroy());
  extra.on('error', () => {});
  let answered = '';
  extra.on('data', (d: Buffer) => (answered += d.toString('latin1')));
  extra.write('GET /healthz HTTP/1.1\r\nHost: meta\r\n\r\n');
  await once(extra, 'close');
  assert.equal(answered, '');
  await assert.rejects(metaGet(port, '/healthz'), /ECONNRESET|socket hang up|EPIPE/);
  assert.equal(meta.connectionCount, DEFAULT_META_MAX_CONNECTIONS);
  // One line each (the limiter's burst is 5 a kind).
  assert.equal(log.find('meta port has as many connections as it takes; a new one was closed').length, 2);

  for (const s of held.splice(0, 10)) s.destroy();
  await waitFor('the meta port to let ten go', () => meta.connectionCount === DEFAULT_META_MAX_CONNECTIONS - 10);
  assert.deepEqual(await metaGet(port, '/healthz'), { status: 200, body: 'ok' });
});
