// The agent link over a WebSocket (issue 37 item 2) on the agent port itself,
// over loopback: the agent joins with --transport websocket, bytes cross it
// exact both ways, half-close travels end to end, a session dropped on gRPC is
// resumed over a WebSocket, and what is not an agent's upgrade gets a precise
// HTTP status.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { connect as netConnect, type Socket } from 'node:net';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import WebSocket from 'ws';
import type { ServerConnectionOptions } from '../../pkg/agent/server-connection-options.js';
import { WsAgentCall } from '../../pkg/endpoint/ws-agent-call.js';
import { AgentCall } from '../../pkg/endpoint/agent-call.js';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { digestToEnd } from '../support/stream-digest.js';
import { connectVia, readAll, startAgent, startServer, startTCPServer, waitFor, type TestServer } from '../support/tunnel.js';

const MiB = 1024 * 1024;
const LIMIT = { timeout: 120_000 };

/** The transport of the tunnel's one agent link. */
function linkTransport(server: TestServer): string {
  const backend = server.tunnel.registry.all()[0];
  assert.ok(backend !== undefined, 'one agent is registered');
  const link = backend.sessionLink?.transport ?? backend.link;
  if (link instanceof WsAgentCall) return 'websocket';
  if (link instanceof AgentCall) return 'grpc';
  return 'unknown';
}

/** `total` pseudo-random bytes written with back-pressure, then end; resolves with their SHA-256. */
function pump(s: Socket, total: number): Promise<string> {
  const block = createHash('sha512').update('websocket').digest();
  const chunk = Buffer.alloc(64 * 1024);
  for (let o = 0; o < chunk.length; o += block.length) block.copy(chunk, o);
  const hash = createHash('sha256');
  let sent = 0;
  let i = 0;
  return new Promise((resolve, reject) => {
    s.once('error', reject);
    const go = (): void => {
      while (sent < total) {
        const c = Buffer.from(chunk);
        c.writeUInt32BE(i++, 0);
        hash.update(c);
        sent += c.length;
        if (!s.write(c)) {
          s.once('drain', go);
          return;
        }
      }
      s.end(() => resolve(hash.digest('hex')));
    };
    go();
  });
}

test('an agent with --transport websocket joins, and 32 MiB cross byte-exact each way', LIMIT, async (t) => {
  const h = harness(t);
  let down: Promise<string> | undefined;
  const source = await startTCPServer(h, (s) => {
    down = pump(s, 32 * MiB);
  });
  let up: Promise<{ hash: string; bytes: number }> | undefined;
  const target = await startTCPServer(h, (s) => {
    up = digestToEnd(s);
    void up.then(() => s.end());
  });
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { transport: 'websocket' } });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(linkTransport(server), 'websocket');
  const backend = server.tunnel.registry.all()[0]!;
  assert.ok(backend.flow !== undefined, 'flow control was negotiated over the upgrade headers');
  assert.equal(backend.halfClose, true, 'half-close was negotiated over the upgrade headers');

  const d = await connectVia(server.udsPath, `127.0.0.1:${source.port}`);
  assert.equal(d.status, 200, d.head);
  const hashIn = createHash('sha256').update(d.rest);
  d.socket.on('data', (c: Buffer) => hashIn.update(c));
  const got = await digestToEnd(d.socket);
  assert.equal(got.bytes + d.rest.length, 32 * MiB);
  assert.equal(hashIn.digest('hex'), await down, 'download byte-exact');

  const u = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  assert.equal(u.status, 200, u.head);
  const sent = pump(u.socket, 32 * MiB);
  await waitFor('the target to be connected', () => up !== undefined);
  const [hash, r] = await Promise.all([sent, up!]);
  assert.equal(r.bytes, 32 * MiB);
  assert.equal(r.hash, hash, 'upload byte-exact');
  d.socket.destroy();
  u.socket.destroy();
  await waitFor('tables empty', () => server.tunnel.establishedCount() === 0);
});

test('over a WebSocket a half-close travels end to end and the answer still comes back', LIMIT, async (t) => {
  const h = harness(t);
  const target = await startTCPServer(h, (s: Socket) => {
    let got = '';
    s.on('data', (c: Buffer) => (got += c.toString()));
    // The answer only after EOF: only a half-close that arrived lets it go.
    s.once('end', () => s.end(`got ${got.length} bytes then EOF`));
  });
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { transport: 'websocket' } });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  const socket = netConnect({ path: server.udsPath, allowHalfOpen: true });
  await once(socket, 'connect');
  socket.end(`CONNECT 127.0.0.1:${target.port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nhello`);
  const answer = (await readAll(socket)).toString();
  assert.equal(answer, 'HTTP/1.1 200 Connection Established\r\n\r\ngot 5 bytes then EOF');
  await waitFor('tables empty', () => server.tunnel.establishedCount() === 0 && target.sockets.size === 0);
});

test('a session dropped on gRPC resumes over a WebSocket, nothing lost', LIMIT, async (t) => {
  const h = harness(t);
  let down: Promise<string> | undefined;
  const source = await startTCPServer(h, (s) => {
    down = pump(s, 64 * MiB);
  });
  const server = await startServer(h, { endpoint: { resumeWindowMs: 10_000 } });
  const relay = await startBlipRelay(h, [server.endpoint.address.port]);
  const agent = startAgent(h, `127.0.0.1:${relay.port}`, { nodeName: 'edge-1', connection: { resumeWindowMs: 10_000, transport: 'grpc' } });
  // What each new link of the client set is made with (read at each dial).
  const connection = (agent.clients as unknown as { opts: { connection: ServerConnectionOptions } }).opts.connection;
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(linkTransport(server), 'grpc');
  assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

  const d = await connectVia(server.udsPath, `127.0.0.1:${source.port}`);
  assert.equal(d.status, 200, d.head);
  const hashIn = createHash('sha256').update(d.rest);
  let bytes = d.rest.length;
  let blipped: Promise<void> | undefined;
  d.socket.on('data', (c: Buffer) => {
    hashIn.update(c);
    bytes += c.length;
    if (blipped === undefined && bytes >= 16 * MiB) {
      // The agent's next calls go over a WebSocket (the options are read at each dial).
      connection.transport = 'websocket';
      blipped = relay.blip('reset', 1000);
    }
  });
  d.socket.resume();
  await once(d.socket, 'end');
  await blipped;
  assert.equal(bytes, 64 * MiB);
  assert.equal(hashIn.digest('hex'), await down, 'the bytes arrived once each, in order');
  assert.ok(server.log.find('agent link resumed').length >= 1, 'the session was resumed');
  assert.equal(linkTransport(server), 'websocket', 'the resumed session runs over the WebSocket');
  d.socket.destroy();
});

test('the agent port answers what is not an agent upgrade with a precise status', LIMIT, async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const pki = testPKI();
  const cert = pki.agent('edge-1', 'ipv4=127.0.0.1&host=edge-1');
  const tls = { ca: pki.ca.cert, cert: cert.cert, key: cert.key, servername: 'localhost', checkServerIdentity: () => undefined };

  // A plain HTTP/1.1 request: 426, saying what the port speaks.
  const plain = tlsConnect({ host: '127.0.0.1', port: server.endpoint.address.port, ALPNProtocols: ['http/1.1'], ...tls });
  plain.on('error', () => {});
  await once(plain, 'secureConnect');
  plain.end('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
  const answer = (await readAll(plain)).toString();
  assert.match(answer, /^HTTP\/1\.1 426 Upgrade Required\r\n/);
  assert.match(answer, /it speaks gRPC \(HTTP\/2, ALPN h2\) or a WebSocket upgrade/);

  // An upgrade whose agentid the certificate does not name: 403 with the gRPC status of the refusal.
  const ws = new WebSocket(`wss://127.0.0.1:${server.endpoint.address.port}/any/path`, { ...tls, headers: { agentid: 'edge-2' } });
  ws.on('error', () => {});
  const [, res] = (await once(ws, 'unexpected-response')) as [unknown, import('node:http').IncomingMessage];
  assert.equal(res.statusCode, 403);
  assert.equal(res.headers['grpc-status'], '7');
  assert.match(String(res.headers['grpc-message']), /agent identity check \(strict\) failed/);
  res.resume();
  ws.terminate();
  assert.equal(server.tunnel.registry.agentCount, 0);
});

// A blip longer than the resume window, on the path of a busy download over a
// WebSocket: the sessions expire (or the agent's late resume of a session it
// gave up says goodbye), and the download must end as a failure, never as a
// clean end with fewer bytes. 'silent' is the black hole of a load balancer's
// dropped port (its side towards the server stays open); 'reset' a cut. The
// CONNECT caller is a Unix socket, which cannot be reset (cut-streams.test.ts):
// it sees EOF either way, so the failure is watched where it can be seen, in
// the tunnelled connection the caller is spliced to and in the access line.
for (const kind of ['silent', 'reset'] as const) {
  test(`over a WebSocket a ${kind} blip past the resume window ends the download as a failure, never a clean short end`, LIMIT, async (t) => {
    const h = harness(t);
    const total = 64 * MiB;
    const source = await startTCPServer(h, (s) => {
      s.on('error', () => {});
      pump(s, total).catch(() => {});
    });
    const windowMs = 1000;
    const server = await startServer(h, { endpoint: { resumeWindowMs: windowMs } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    startAgent(h, `127.0.0.1:${relay.port}`, { nodeName: 'edge-1', connection: { resumeWindowMs: windowMs, transport: 'websocket' } });
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
    assert.equal(linkTransport(server), 'websocket');
    assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

    const conn = await server.tunnel.dial(`127.0.0.1:${source.port}`);
    let bytes = 0;
    let blipped: Promise<void> | undefined;
    conn.on('data', (c: Buffer) => {
      bytes += c.length;
      if (blipped === undefined && bytes >= 4 * MiB) blipped = relay.blip(kind, 3 * windowMs + 1000);
    });
    const ended = await new Promise<string>((resolve) => {
      conn.once('end', () => resolve(`clean end after ${bytes} of ${total} bytes`));
      conn.once('error', (err: Error & { code?: string }) => resolve(`error ${err.code ?? err.message}`));
    });
    await blipped;
    assert.ok(bytes < total, `the download was cut (${bytes} bytes)`);
    assert.match(ended, /^error YT_ERR_(AGENT_LOST|CONNECTION_CLOSED)$/, 'the tunnelled connection ends with an error');
    await waitFor('the access line', () => server.log.find('connection ended').length === 1);
    assert.notEqual(server.log.find('connection ended')[0]!.fields.ended, 'closed', 'the access line records a failure');
    conn.destroy();
  });
}

// The same cut with the server writing (an upload): the server's side of the
// WebSocket must take the failed write as the link failing, as the agent's does.
test('over a WebSocket a reset blip past the resume window ends an upload as a failure, and the server keeps serving', LIMIT, async (t) => {
  const h = harness(t);
  const total = 256 * MiB;
  let received = 0;
  const target = await startTCPServer(h, (s) => {
    s.on('data', (c: Buffer) => (received += c.length));
  });
  const windowMs = 1000;
  const server = await startServer(h, { endpoint: { resumeWindowMs: windowMs } });
  const relay = await startBlipRelay(h, [server.endpoint.address.port]);
  startAgent(h, `127.0.0.1:${relay.port}`, { nodeName: 'edge-1', connection: { resumeWindowMs: windowMs, transport: 'websocket' } });
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(linkTransport(server), 'websocket');

  const conn = await server.tunnel.dial(`127.0.0.1:${target.port}`);
  const chunk = Buffer.alloc(64 * 1024, 7);
  let sent = 0;
  let blipped: Promise<void> | undefined;
  const ended = new Promise<string>((resolve) => {
    conn.once('error', (err: Error & { code?: string }) => resolve(`error ${err.code ?? err.message}`));
    conn.once('close', () => resolve('closed without an error'));
  });
  // Bounded by `total`: the upload is cut long before.
  const write = (): void => {
    while (sent < total && !conn.destroyed) {
      if (blipped === undefined && received >= 4 * MiB) blipped = relay.blip('reset', 3 * windowMs + 1000);
      sent += chunk.length;
      if (!conn.write(chunk)) {
        conn.once('drain', write);
        return;
      }
    }
  };
  write();
  assert.match(await ended, /^error YT_ERR_(AGENT_LOST|CONNECTION_CLOSED)$/, 'the tunnelled connection ends with an error');
  assert.ok(blipped !== undefined, 'the path was cut mid-upload');
  await blipped;
  assert.ok(received < total, `the upload was cut (${received} bytes)`);
  // The server is still there: the agent comes back with a fresh link.
  await waitFor('agent edge-1 to register again', () => server.tunnel.registry.agentCount === 1, 10_000);
});
