// Every listener of the server gives a caller a bounded time for its TLS
// handshake and for its request head (--tls-handshake-timeout,
// --request-head-timeout, --connect-head-timeout); one that takes longer is
// closed, logged and counted in yurttunnel_server_refused_callers_total.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { Registry } from 'prom-client';
import { TunnelServer } from '../../pkg/server/app.js';
import { harness, type Harness } from '../support/harness.js';
import { H2_PREFACE, h2Frame } from '../support/http2-frames.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { testServerOptions } from '../support/server-options.js';
import { tempDir } from '../support/tunnel.js';

const LIMIT = { timeout: 120_000 };
const TIMEOUT_MS = 400;
const HALF_HEAD = 'GET /containerLogs/ns/pod/c HTTP/1.1\r\nHost: edge-1:10250\r\nX-Slow: ';

interface SlowCaller {
  /** What the listener sent before it closed the connection. */
  answer: string;
  /** Milliseconds from before connecting until the close. */
  elapsedMs: number;
}

/** Connects with `open`, sends `first` (if any) and nothing more, and waits (at most 10 s) for the listener to close the connection. */
async function slowCaller(h: Harness, open: () => Socket, first?: Buffer | string): Promise<SlowCaller> {
  const started = performance.now();
  const socket = open();
  h.defer(() => socket.destroy());
  socket.on('error', () => {});
  let answer = '';
  socket.on('data', (c: Buffer) => (answer += c.toString('latin1')));
  if (first !== undefined) socket.write(first);
  const closed = once(socket, 'close').then(() => true);
  const gaveUp = new Promise<false>((r) => setTimeout(() => r(false), 10_000).unref());
  assert.ok(await Promise.race([closed, gaveUp]), `the listener did not close a slow caller within 10 s (got ${JSON.stringify(answer)})`);
  return { answer, elapsedMs: performance.now() - started };
}

async function refusals(registry: Registry): Promise<Record<string, number>> {
  const metric = await registry.getSingleMetric('yurttunnel_server_refused_callers_total')!.get();
  return Object.fromEntries(metric.values.filter((v) => v.value > 0).map((v) => [`${v.labels.listener} ${v.labels.reason}`, v.value]));
}

const timeouts = { tlsHandshakeTimeoutMs: TIMEOUT_MS, requestHeadTimeoutMs: TIMEOUT_MS, connectHeadTimeoutMs: TIMEOUT_MS };

test('a silent or slow caller is closed at its timeout on every listener, logged and counted', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const log = new MemoryLogger(2);
  const registry = new Registry();
  const egressPath = join(dir, 'egress.sock');
  const server = await TunnelServer.start(
    testServerOptions(dir, { ...timeouts, egressSelector: { uds: egressPath, mode: 'grpc' }, logger: log, metricsRegistry: registry }),
  );
  h.defer(() => server.stop());
  const certDir = join(dir, 'server-pki');
  const [ca, cert, key] = await Promise.all(['ca.crt', 'tunnel-proxy-client.crt', 'tunnel-proxy-client.key'].map((f) => readFile(join(certDir, f), 'utf8')));
  const securePort = server.master.address('secure').port;
  const insecurePort = server.master.address('insecure').port;
  const agentPort = server.agentEndpoint.address.port;
  const tcp = (port: number) => () => connect(port, '127.0.0.1');
  const uds = (path: string) => () => connect(path);

  const secureSlowHead = async (): Promise<SlowCaller> => {
    const started = performance.now();
    const s = tlsConnect({ host: '127.0.0.1', port: securePort, ca, cert, key, servername: 'localhost', ALPNProtocols: ['http/1.1'] });
    s.on('error', () => {});
    await once(s, 'secureConnect');
    const r = await slowCaller(h, () => s, HALF_HEAD);
    return { ...r, elapsedMs: performance.now() - started };
  };
  const [secureSilent, secureSlow, insecureSlow, insecureSilent, agentSilent, proxierSlow, egressSilent, egressPrefaceOnly] = await Promise.all([
    slowCaller(h, tcp(securePort)),
    secureSlowHead(),
    slowCaller(h, tcp(insecurePort), HALF_HEAD),
    slowCaller(h, tcp(insecurePort)),
    slowCaller(h, tcp(agentPort)),
    slowCaller(h, uds(join(dir, 'proxier.sock')), 'CONNECT 127.0.0.1:10250 HTTP/1.1\r\nHost: 127'),
    slowCaller(h, uds(egressPath)),
    slowCaller(h, uds(egressPath), Buffer.concat([H2_PREFACE, h2Frame(0x4 /* SETTINGS */, 0, 0, Buffer.alloc(0))])),
  ]);

  for (const [name, c] of Object.entries({
    secureSilent,
    secureSlow,
    insecureSlow,
    insecureSilent,
    agentSilent,
    proxierSlow,
    egressSilent,
    egressPrefaceOnly,
  })) {
    assert.ok(c.elapsedMs >= TIMEOUT_MS, `${name}: closed after ${c.elapsedMs} ms, before the timeout`);
  }
  // Callers with a complete TLS session, or none at all, get a 408 saying why.
  for (const c of [secureSlow, insecureSlow, insecureSilent, proxierSlow]) assert.match(c.answer, /^HTTP\/1\.1 408 Request Timeout\r\n/);
  assert.match(secureSlow.answer, /no complete request head within 400 ms\n$/);
  assert.equal(secureSilent.answer, '');
  assert.equal(agentSilent.answer, '');

  assert.deepEqual(await refusals(registry), {
    'secure tls_handshake_timeout': 1,
    'secure head_timeout': 1,
    'insecure head_timeout': 2,
    'agent tls_handshake_timeout': 1,
    'proxier head_timeout': 1,
    'egress head_timeout': 2,
  });
  for (const line of [
    'caller did not finish its TLS handshake in time on the secure master port; closed',
    'caller sent no complete request head in time; closed',
    'agent connection did not finish its TLS handshake in time; closed',
    'client sent no complete CONNECT request in time; closed',
    'egress client opened no call in time; closed',
  ]) {
    assert.ok(log.find(line).length >= 1, `logged: ${line}`);
  }
});

test('the HTTP-CONNECT egress socket closes a slow CONNECT head at --connect-head-timeout', LIMIT, async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const registry = new Registry();
  const egressPath = join(dir, 'egress.sock');
  const server = await TunnelServer.start(
    testServerOptions(dir, { ...timeouts, egressSelector: { uds: egressPath, mode: 'http-connect' }, metricsRegistry: registry }),
  );
  h.defer(() => server.stop());
  const slow = await slowCaller(h, () => connect(egressPath), 'CONNECT 127.0.0.1:10250 HTTP/1.1\r\n');
  assert.ok(slow.elapsedMs >= TIMEOUT_MS, `closed after ${slow.elapsedMs} ms`);
  assert.match(slow.answer, /^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*no complete request head within 400 ms\n$/);
  assert.deepEqual(await refusals(registry), { 'egress head_timeout': 1 });
});
