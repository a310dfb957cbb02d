// Admission under floods a caller can send at will (issue 33): the cheap
// refusals (connect rate, identity) come before anything logged per item,
// every warning goes through the log limiter, and nothing a caller writes
// reaches the log stream as a raw control byte. Calls are raw HTTP/2 over
// mutual TLS, so the test controls every header byte.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { dialServer } from '../../pkg/agent/server-dial.js';
import { AGENT_CONNECT_PATH } from '../../pkg/grpc/services.js';
import type { LogFormat } from '../../pkg/log/logger.js';
import { silentLogger } from '../../pkg/log/logger.js';
import { harness, type Harness } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { testPKI } from '../support/pki.js';
import { startServer, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };
const MiB = 1024 * 1024;

/** An agent identifier key that colours a terminal red, percent-encoded as URLSearchParams reads it. */
const RED_KEY = '%1b[31mRED%1b[0m';
/** About 14 KB of metadata: the red key and 7,000 unknown keys `x`. */
const JUNK_IDENTIFIERS = `${RED_KEY}=1&host=edge-1&${'x&'.repeat(7000)}`;

// eslint-disable-next-line no-control-regex -- looking for raw control bytes is the point
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/;

interface CallAnswer {
  /** grpc-status of a refusal; undefined when the call was accepted. */
  status: string | undefined;
  message: string;
}

/** One HTTP/2 connection with `cert` (edge-1's by default) to the agent port. */
async function agentSession(h: Harness, address: string, nodeName = 'edge-1'): Promise<http2.ClientHttp2Session> {
  const pki = testPKI();
  const session = http2.connect(`https://${address}`, { ca: pki.ca.cert, ...pki.agent(nodeName, `host=${nodeName}`), servername: 'localhost' });
  h.defer(() => session.destroy());
  session.on('error', () => {});
  await once(session, 'connect');
  return session;
}

/** One Connect call with `metadata`; resolves with its refusal, or with no status once accepted (the call is then closed). */
async function connectCall(session: http2.ClientHttp2Session, metadata: Record<string, string>): Promise<CallAnswer> {
  const call = session.request({ ':method': 'POST', ':path': AGENT_CONNECT_PATH, 'content-type': 'application/grpc', te: 'trailers', ...metadata });
  call.on('error', () => {});
  const [headers] = (await once(call, 'response')) as [http2.IncomingHttpHeaders];
  call.close();
  const status = headers['grpc-status'];
  return { status: status === undefined ? undefined : String(status), message: decodeURIComponent(String(headers['grpc-message'] ?? '')) };
}

for (const format of ['text', 'json'] as const satisfies readonly LogFormat[]) {
  test(
    `${format} log: a flood of calls with 7,000 unknown identifier keys each writes a bounded number of lines, none with a raw control byte`,
    LIMIT,
    async (t) => {
      const h = harness(t);
      const log = captureLog(format);
      const server = await startServer(h, { endpoint: { logger: log.logger, maxStreamsPerAgent: 100, maxConnectRate: 0 } });
      const session = await agentSession(h, server.agentAddress);
      const before = log.lines().length;
      for (let i = 0; i < 24; i++) {
        // The agent itself, and an impostor with its certificate: neither may log each key.
        const own = await connectCall(session, { agentid: 'edge-1', agentidentifiers: JUNK_IDENTIFIERS });
        assert.equal(own.status, undefined, own.message);
        const impostor = await connectCall(session, { agentid: 'edge-2', agentidentifiers: JUNK_IDENTIFIERS });
        assert.equal(impostor.status, '7', impostor.message);
      }
      // Let every line the calls caused reach the stream.
      await waitFor('the calls to end', () => server.tunnel.registry.agentCount === 0);
      const lines = log.lines().slice(before);
      assert.ok(lines.length <= 20, `${lines.length} lines for 48 calls:\n${lines.slice(0, 30).join('\n')}`);
      assert.doesNotMatch(log.text(), RAW_CONTROL);
      const unknown = lines.filter((l) => l.includes('ignoring unknown agent identifier keys'));
      assert.ok(unknown.length >= 1 && unknown.length <= 5, `${unknown.length} unknown-key lines`);
      if (format === 'text') {
        assert.match(unknown[0]!, / agentID=edge-1 unknownKeys=7001 firstKeys=\["\\x1b\[31mRED\\x1b\[0m","x","x"\]/);
      } else {
        const line = JSON.parse(unknown[0]!) as Record<string, unknown>;
        assert.equal(line.unknownKeys, 7001);
        assert.deepEqual(line.firstKeys, ['\x1b[31mRED\x1b[0m', 'x', 'x']);
      }
      assert.ok(log.bytes < 64 * 1024, `${log.bytes} bytes of log`);
    },
  );
}

test('300 calls refused by the identity check write a bounded number of lines', LIMIT, async (t) => {
  const h = harness(t);
  const log = captureLog('text');
  const server = await startServer(h, { endpoint: { logger: log.logger, maxConnectRate: 0 } });
  const session = await agentSession(h, server.agentAddress);
  const before = log.lines().length;
  for (let i = 0; i < 300; i += 10) {
    const answers = await Promise.all(Array.from({ length: 10 }, (_, j) => connectCall(session, { agentid: `edge-${i + j + 2}` })));
    for (const a of answers) assert.equal(a.status, '7', a.message);
  }
  const lines = log.lines().slice(before);
  assert.ok(lines.length <= 12, `${lines.length} lines for 300 refusals:\n${lines.join('\n')}`);
  assert.equal(lines.filter((l) => l.includes('agent refused by the identity check')).length, 5);
});

test('a non-ASCII agent ID is refused with INVALID_ARGUMENT saying why, whatever the identity check', LIMIT, async (t) => {
  const h = harness(t);
  // node:http2 sends a header value's characters as latin1 bytes: these are the UTF-8 bytes of the name.
  const utf8ID = Buffer.from('节点-ü-😀', 'utf8').toString('latin1');
  for (const identityCheck of ['none', 'strict'] as const) {
    const server = await startServer(h, { endpoint: { identityCheck } });
    const session = await agentSession(h, server.agentAddress);
    const answer = await connectCall(session, { agentid: utf8ID });
    assert.equal(answer.status, '3', answer.message);
    assert.equal(
      answer.message,
      'the agent ID in the "agentid" metadata must be printable ASCII (gRPC metadata values are; node names are lower-case DNS names), ' +
        'got byte 0xe8 at offset 0 of "\\xe8\\x8a\\x82\\xe7\\x82\\xb9-\\xc3\\xbc-\\xf0\\x9f\\x98\\x80"',
    );
    // (Control bytes never get this far: nghttp2 drops a header field holding one.)
    assert.equal(server.tunnel.registry.agentCount, 0, identityCheck);
    session.destroy();
  }
});

test('resume claims count in the connect rate: a claim flood is refused UNAVAILABLE, and what it logs stays bounded', LIMIT, async (t) => {
  const h = harness(t);
  const rate = 5;
  const server = await startServer(h, { endpoint: { maxConnectRate: rate } });
  const pki = testPKI();
  const target = {
    address: server.agentAddress,
    verifyName: '127.0.0.1',
    tls: { ca: pki.ca.cert, ...pki.agent('edge-1', 'host=edge-1') },
    agentID: 'edge-1',
    identifiers: 'host=edge-1',
    receiveWindow: 1 * MiB,
    connWindow: 1 * MiB,
    halfClose: true,
    handshakeTimeoutMs: 10_000,
  };
  const first = await dialServer({ ...target, resume: { windowMs: 10_000, claims: [] } }, silentLogger());
  h.defer(() => first.session.destroy());
  const token = first.offer?.token;
  assert.ok(token !== undefined, 'the call opened a resumable session');
  // Each claim takes the session back from the call before it, as fast as the agent can dial.
  const started = performance.now();
  const claims = 40;
  let resumed = 0;
  const refusals: string[] = [];
  for (let attempt = 1; attempt <= claims; attempt++) {
    try {
      const d = await dialServer({ ...target, resume: { windowMs: 10_000, claims: [{ token, received: 0, attempt }] } }, silentLogger());
      h.defer(() => d.session.destroy());
      if (d.offer?.resumedReceived !== undefined) resumed++;
    } catch (err: unknown) {
      refusals.push(String(err));
    }
  }
  const seconds = (performance.now() - started) / 1000;
  // The bucket holds 2 × rate; the first call took one.
  const allowed = 2 * rate + Math.ceil(seconds * rate);
  assert.ok(resumed <= allowed, `${resumed} claims honoured in ${seconds.toFixed(2)} s at ${rate}/s`);
  assert.ok(refusals.length >= claims - allowed, `${refusals.length} refused`);
  for (const r of refusals)
    assert.match(r, /refused the call \(HTTP 200, UNAVAILABLE: too many agents are connecting \(limit 5 per second, --max-agent-connect-rate\)/);
  assert.equal(server.endpoint.refusals.connect_rate, refusals.length);
  assert.ok(server.log.find('agent link resumed').length <= allowed);
  assert.ok(server.log.find('agents refused by the connect rate limit').length <= 1 + Math.ceil(seconds / 5));
});

test('HTTP/1.1 connections (no ALPN: as load balancers dial) that send garbage get 400, with a bounded number of lines', LIMIT, async (t) => {
  const h = harness(t);
  const log = captureLog('text');
  const server = await startServer(h, { endpoint: { logger: log.logger } });
  const pki = testPKI();
  const before = log.lines().length;
  for (let i = 0; i < 12; i++) {
    const socket = tlsConnect({
      host: '127.0.0.1',
      port: server.endpoint.address.port,
      ca: pki.ca.cert,
      ...pki.agent('edge-1'),
      servername: 'localhost',
    });
    h.defer(() => socket.destroy());
    // Offering no ALPN at all is HTTP/1.1 (an offer without h2 or http/1.1 fails the handshake, which is limited apart).
    socket.on('error', () => {});
    await once(socket, 'secureConnect');
    socket.write('not a request\r\n\r\n');
    let answer = '';
    socket.on('data', (c: Buffer) => (answer += c.toString()));
    await once(socket, 'close');
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
  }
  const lines = log.lines().slice(before);
  assert.ok(lines.length <= 5, `${lines.length} lines for 12 connections:\n${lines.join('\n')}`);
  assert.equal(lines.filter((l) => l.includes('malformed HTTP/1.1 request on the agent port')).length, 5);
});
