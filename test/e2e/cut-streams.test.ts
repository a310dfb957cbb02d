// A stream cut by a failure must not look like a finished one: an agent
// killed mid-download or mid-exec, a target that resets, a caller that
// resets, a server that goes away. Each end caused by a failure reaches the
// other side as a failure (a TCP reset, a gRPC error status, an aborted HTTP
// response), and a normal end still ends normally.
//
// The CONNECT socket is a Unix socket, which has no reset: its callers see EOF
// either way (Linux reports ECONNRESET only to a peer whose bytes were left
// unread), so these tests watch the failure where it can be seen.
//
// A Node client sees a reset as ECONNRESET only if it had read everything
// before the RST came: libuv reports EOF for a reset that follows a partial
// read. The exec sessions below are therefore cut while idle, after an echo.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHTTPServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect } from 'node:tls';
import { Registry } from 'prom-client';
import { GrpcProxyServer } from '../../pkg/frontend/grpc-proxy.js';
import { GrpcStatus } from '../../pkg/grpc/status.js';
import { ConnectionClosedError } from '../../pkg/protocol/errors.js';
import { localAgentFlags } from '../../hack/local-tunnel.js';
import { egressDial } from '../support/egress-client.js';
import { harness, type Harness } from '../support/harness.js';
import { apiserverClientCert, startKubelet, startMaster } from '../support/master.js';
import { testPKI, writePKIFiles } from '../support/pki.js';
import { CHANNEL, SPDY_EXEC_PROTOCOLS, upgradeToChannelWebSocket, upgradeToSpdy } from '../support/standin-kubelet/index.js';
import { AGENT_BIN, startProcess, type Proc } from '../support/processes.js';
import { connectVia, startFirehose, startServer, startTCPServer, startTunnel, tempDir, waitFor, waitForSteady, type TestServer } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };
const RESET = /^(ECONNRESET|EPIPE)$/;

async function startEgress(h: Harness, server: TestServer): Promise<string> {
  const path = join(await tempDir(h), 'egress.sock');
  const egress = new GrpcProxyServer(server.tunnel, { path });
  await egress.start();
  h.defer(() => egress.close());
  return path;
}

/** The real yurt-tunnel-agent for node edge-1 (127.0.0.1), connected to `server`. */
async function startAgentProcess(h: Harness, server: TestServer, extra: string[] = []): Promise<Proc> {
  const pki = testPKI();
  const agentDir = await tempDir(h);
  await writePKIFiles(agentDir, pki.agent('edge-1', 'ipv4=127.0.0.1&host=edge-1'), pki.ca);
  const agent = startProcess(h, AGENT_BIN, [
    ...localAgentFlags({ nodeName: 'edge-1', serverPort: server.endpoint.address.port, agentDir }),
    '--v',
    '2',
    // Killed, the agent is to the server a link that dropped: with session resume its
    // connections would wait for it (session-resume.test.ts); here they end at once.
    '--resume-window',
    '0',
    ...extra,
  ]);
  await agent.waitForLine(/connected to tunnel server/);
  await waitFor('the agent to register', () => server.tunnel.registry.agentCount === 1);
  return agent;
}

/** How a socket's stream ends for its reader: 'end' (EOF) or the error's code. */
function endOf(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    socket.once('end', () => resolve('end'));
  });
}

/** How a response ends for its reader: 'end' when whole, 'aborted' when cut; resolves with the first bytes too. */
function readResponse(res: IncomingMessage): { ended: Promise<string>; firstBytes: Promise<void> } {
  const firstBytes = once(res, 'data').then(() => undefined);
  const ended = new Promise<string>((resolve) => {
    res.once('aborted', () => resolve('aborted'));
    res.once('end', () => resolve(res.complete ? 'end' : 'aborted'));
    res.on('error', () => resolve('aborted'));
  });
  res.resume();
  return { ended, firstBytes };
}

/** A plain HTTP target that streams a chunk every 20 ms until the client goes. */
async function startStreamingHTTP(h: Harness): Promise<number> {
  const server = createHTTPServer((_req, res: ServerResponse) => {
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    const timer = setInterval(() => res.write('line\n'), 20);
    res.once('close', () => clearInterval(timer));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  return (server.address() as { port: number }).port;
}

/** A TCP connection to the plain master port. */
async function dialPlain(h: Harness, port: number): Promise<Socket> {
  const socket = connect({ host: '127.0.0.1', port });
  h.defer(() => socket.destroy());
  await once(socket, 'connect');
  return socket;
}

/** A TLS connection to the secure master port, as kube-apiserver opens one for an upgrade. */
async function dialSecure(h: Harness, port: number): Promise<Socket> {
  const socket = tlsConnect({ host: '127.0.0.1', port, ca: testPKI().ca.cert, ...apiserverClientCert(), servername: '', ALPNProtocols: ['http/1.1'] });
  h.defer(() => socket.destroy());
  await once(socket, 'secureConnect');
  return socket;
}

const EXEC_CAT = '/exec/default/p1/c1?command=cat&input=1&output=1';

/** `kubectl exec … cat` over WebSocket (v5) on `socket`; resolves once stdin came back on stdout. */
async function webSocketExec(socket: Socket, host: string): Promise<void> {
  const { client } = await upgradeToChannelWebSocket({ socket, target: EXEC_CAT, protocols: ['v5.channel.k8s.io'], host });
  client.on('protocolError', () => {});
  const echoed = new Promise<void>((resolve) => client.on('data', (channel: number) => channel === CHANNEL.stdout && resolve()));
  client.write(CHANNEL.stdin, Buffer.from('hello\n'));
  await echoed;
}

/** `kubectl exec … cat` over SPDY/3.1 on `socket`; resolves once stdin came back on stdout. */
async function spdyExec(socket: Socket, host: string): Promise<void> {
  const { session } = await upgradeToSpdy({ socket, target: EXEC_CAT, protocols: SPDY_EXEC_PROTOCOLS, host });
  session.on('error', () => {});
  const error = await session.openStream({ streamtype: 'error' });
  error.end();
  const stdin = await session.openStream({ streamtype: 'stdin' });
  const stdout = await session.openStream({ streamtype: 'stdout' });
  stdout.end();
  const echoed = once(stdout, 'data');
  stdin.write('hello\n');
  await echoed;
}

test(
  'an agent killed mid-download: the egress caller gets the error and UNAVAILABLE, master-port responses are aborted; a download that finished before ended normally',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const server = await startServer(h);
    const egressPath = await startEgress(h, server);
    const { securePort, insecurePort } = await startMaster(h, server);
    const kubelet = await startKubelet(h, 'edge-1', { followIntervalMs: 20 });
    const plainPort = await startStreamingHTTP(h);
    const firehose = await startFirehose(h);
    const complete = await startTCPServer(h, (s) => s.end('the whole answer'));
    const agent = await startAgentProcess(h, server);

    // A normal end: everything, CLOSE_RSP without an error, status OK.
    const whole = await egressDial(h, egressPath, `127.0.0.1:${complete.port}`);
    const wholeStatus = await whole.status;
    assert.equal(wholeStatus.code, GrpcStatus.OK, wholeStatus.details);
    assert.equal(whole.received().toString(), 'the whole answer');
    assert.equal(whole.closeResponse()?.error, '');

    // Three downloads under way when the agent dies.
    const download = await egressDial(h, egressPath, `127.0.0.1:${firehose.port}`);
    const plainReq = httpRequest({ host: '127.0.0.1', port: insecurePort, path: '/stream', headers: { Host: `127.0.0.1:${plainPort}` }, agent: false });
    plainReq.on('error', () => {});
    plainReq.end();
    const [plainRes] = (await once(plainReq, 'response')) as [IncomingMessage];
    const plainSocketEnd = endOf(plainRes.socket);
    const plain = readResponse(plainRes);
    const secureReq = httpsRequest({
      host: '127.0.0.1',
      port: securePort,
      path: '/containerLogs/default/p1/c1?follow=true',
      headers: { Host: `127.0.0.1:${kubelet.port}` },
      ca: testPKI().ca.cert,
      ...apiserverClientCert(),
      servername: '',
      agent: false,
    });
    secureReq.on('error', () => {});
    secureReq.end();
    const [secureRes] = (await once(secureReq, 'response')) as [IncomingMessage];
    const secure = readResponse(secureRes);
    await Promise.all([plain.firstBytes, secure.firstBytes]);
    await waitFor('bytes of the download', () => download.received().length > 0);
    assert.equal(plainRes.headers['transfer-encoding'], 'chunked');
    assert.equal(secureRes.headers['transfer-encoding'], 'chunked');

    agent.kill('SIGKILL');

    const status = await download.status;
    assert.equal(status.code, GrpcStatus.UNAVAILABLE, `status ${status.code} ${status.details}`);
    assert.match(status.details, /^connection to 127\.0\.0\.1:\d+ through agent edge-1 failed: agent edge-1 disconnected: /);
    assert.match(download.closeResponse()?.error ?? '', /agent edge-1 disconnected/);
    // The plain master port resets its caller; the secure one cuts the response before its last chunk.
    assert.equal(await plainSocketEnd, 'ECONNRESET');
    assert.equal(await plain.ended, 'aborted');
    assert.equal(await secure.ended, 'aborted');
  },
);

test('a target that resets: through our agent the caller sees the failure; a target that closes normally still ends normally', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const egressPath = await startEgress(h, server);
  const resetting = await startTCPServer(h, (s) => {
    s.write('partial');
    s.once('data', () => s.resetAndDestroy());
  });
  const closing = await startTCPServer(h, (s) => {
    s.write('partial');
    s.once('data', () => s.end('and the rest'));
  });

  // GRPC egress: the agent's CLOSE_RSP error comes through, and the status says it failed.
  const cut = await egressDial(h, egressPath, `127.0.0.1:${resetting.port}`);
  await waitFor('the first bytes', () => cut.received().length > 0);
  cut.call.write({ type: 'DATA', data: { connectID: cut.connectID, error: '', data: Buffer.from('go on') } });
  const cutStatus = await cut.status;
  assert.equal(cutStatus.code, GrpcStatus.UNAVAILABLE, cutStatus.details);
  assert.match(cutStatus.details, /agent edge-1 ended the connection to 127\.0\.0\.1:\d+ with an error: read ECONNRESET/);
  assert.match(cut.closeResponse()?.error ?? '', /read ECONNRESET/);

  const whole = await egressDial(h, egressPath, `127.0.0.1:${closing.port}`);
  await waitFor('the first bytes', () => whole.received().length > 0);
  whole.call.write({ type: 'DATA', data: { connectID: whole.connectID, error: '', data: Buffer.from('go on') } });
  const wholeStatus = await whole.status;
  assert.equal(wholeStatus.code, GrpcStatus.OK, wholeStatus.details);
  assert.equal(whole.received().toString(), 'partialand the rest');
  assert.equal(whole.closeResponse()?.error, '');

  // What every frontend gets from the tunnel: an error, not an end.
  const conn = await server.tunnel.dial(`127.0.0.1:${resetting.port}`);
  conn.resume();
  conn.write('go on');
  const [err] = (await once(conn, 'error')) as [Error];
  assert.ok(err instanceof ConnectionClosedError, String(err));
  assert.match(err.message, /^agent edge-1 ended the connection to 127\.0\.0\.1:\d+ with an error: read ECONNRESET$/);
});

test('a caller that resets or goes away: the target is reset; a caller that ends normally: the target sees EOF', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const egressPath = await startEgress(h, server);
  const ends: Promise<string>[] = [];
  let sent = 0;
  const block = Buffer.alloc(64 * 1024, 1);
  // Sends until the connection is gone; reports how its end looked.
  const target = await startTCPServer(h, (s) => {
    ends.push(endOf(s));
    s.resume();
    const pump = (): void => {
      while (!s.destroyed && s.writable && s.write(block)) sent += block.length;
    };
    s.on('drain', pump);
    pump();
  });
  const address = `127.0.0.1:${target.port}`;

  // A CONNECT caller that stops reading, then closes: the bytes it left unread make its close a reset (ECONNRESET at the proxier).
  const c = await connectVia(server.udsPath, address);
  assert.equal(c.status, 200, c.head);
  await waitFor('the target to send', () => ends.length === 1 && sent > 0);
  await waitForSteady('the target to be held back by the caller that reads nothing', () => sent);
  c.socket.destroy();
  // A target that writes learns of the reset from a write (EPIPE) or a read (ECONNRESET); never EOF.
  assert.match(await ends[0]!, RESET);

  // A GRPC egress client whose stream is cancelled without CLOSE_REQ.
  const g = await egressDial(h, egressPath, address);
  await waitFor('bytes', () => g.received().length > 0);
  g.call.cancel();
  await waitFor('the second target connection', () => ends.length === 2);
  assert.match(await ends[1]!, RESET);

  // A normal close (CLOSE_REQ): the target sees EOF. (This target has said all it had to say: a
  // target still sending when its peer closes gets a reset from the kernel for the bytes it left
  // unread, whatever the tunnel does.)
  const quietEnds: Promise<string>[] = [];
  const quiet = await startTCPServer(h, (s) => {
    quietEnds.push(endOf(s));
    s.resume();
    s.write('hello');
  });
  const n = await egressDial(h, egressPath, `127.0.0.1:${quiet.port}`);
  await waitFor('bytes', () => n.received().length > 0);
  n.call.write({ type: 'CLOSE_REQ', closeRequest: { connectID: n.connectID } });
  assert.equal((await n.status).code, GrpcStatus.OK);
  await waitFor('the quiet target connection', () => quietEnds.length === 1);
  assert.equal(await quietEnds[0], 'end');
});

test('the link to the server lost: the agent resets the connections it carried', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const ends: Promise<string>[] = [];
  const target = await startTCPServer(h, (s) => {
    ends.push(endOf(s));
    s.resume();
    s.write('hello');
  });
  const conn = await server.tunnel.dial(`127.0.0.1:${target.port}`);
  conn.on('error', () => {});
  conn.resume();
  await once(conn, 'data');
  // The server goes away without closing its connections one by one (its agent endpoint first).
  await server.endpoint.close(0);
  assert.equal(await ends[0], 'ECONNRESET');
});

test(
  "an agent killed mid-exec: the plain master port's caller is reset (ECONNRESET), and so is the secure port's, beneath its TLS session",
  LIMIT,
  async (t) => {
    const h = harness(t);
    const server = await startServer(h);
    const { securePort, insecurePort } = await startMaster(h, server, { tlsToKubelet: true });
    const kubelet = await startKubelet(h);
    const agent = await startAgentProcess(h, server);
    const host = `127.0.0.1:${kubelet.port}`;

    const plain = await dialPlain(h, insecurePort);
    await webSocketExec(plain, host);
    const secure = await dialSecure(h, securePort);
    await spdyExec(secure, host);
    const plainEnd = endOf(plain);
    const secureEnd = endOf(secure);

    agent.kill('SIGKILL');
    assert.equal(await plainEnd, 'ECONNRESET');
    assert.equal(await secureEnd, 'ECONNRESET');
  },
);

// kubectl delete of an agent pod: SIGTERM, DRAIN, then the agent waits for its connections until the drain timeout.
// A `logs -f` or exec still open then was cut, not finished: its caller must see a reset, not a normal end.
test('an agent stopped (SIGTERM) with exec sessions open: after its drain timeout both master ports reset their caller', LIMIT, async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const { securePort, insecurePort } = await startMaster(h, server, { tlsToKubelet: true });
  const kubelet = await startKubelet(h);
  const agent = await startAgentProcess(h, server, ['--drain-timeout', '1s']);
  const host = `127.0.0.1:${kubelet.port}`;

  const plain = await dialPlain(h, insecurePort);
  await webSocketExec(plain, host);
  const secure = await dialSecure(h, securePort);
  await spdyExec(secure, host);
  const plainEnd = endOf(plain);
  const secureEnd = endOf(secure);

  agent.kill('SIGTERM');
  await agent.waitForLine(/drain timeout passed/, 10_000);
  assert.equal(await plainEnd, 'ECONNRESET');
  assert.equal(await secureEnd, 'ECONNRESET');
});

test('a kubelet that resets mid-exec: both master ports reset their caller (ECONNRESET)', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const { securePort, insecurePort } = await startMaster(h, server, { tlsToKubelet: true });
  const kubelet = await startKubelet(h);
  const host = `127.0.0.1:${kubelet.port}`;

  const plain = await dialPlain(h, insecurePort);
  await spdyExec(plain, host);
  const secure = await dialSecure(h, securePort);
  await webSocketExec(secure, host);
  const plainEnd = endOf(plain);
  const secureEnd = endOf(secure);

  await kubelet.resetConnections();
  assert.equal(await plainEnd, 'ECONNRESET');
  assert.equal(await secureEnd, 'ECONNRESET');
});

test(
  'the secure port resets 200 exec sessions beneath their TLS sessions, each caller sees ECONNRESET, and every connection is freed',
  { timeout: 180_000 },
  async (t) => {
    const h = harness(t);
    const { server } = await startTunnel(h);
    const registry = new Registry();
    const { securePort } = await startMaster(h, server, { metricsRegistry: registry });
    const kubelet = await startKubelet(h);
    const host = `127.0.0.1:${kubelet.port}`;
    const inFlight = async (): Promise<number> => {
      const metric = (await registry.getMetricsAsJSON()).find((m) => m.name === 'yurttunnel_server_in_proxy_requests');
      return (metric?.values ?? []).reduce((sum, v) => sum + Number(v.value), 0);
    };
    const ends: Record<string, number> = {};
    for (let batch = 0; batch < 10; batch++) {
      const sessions = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const socket = await dialSecure(h, securePort);
          await webSocketExec(socket, host);
          return { end: endOf(socket) };
        }),
      );
      await kubelet.resetConnections();
      for (const end of await Promise.all(sessions.map((s) => s.end))) ends[end] = (ends[end] ?? 0) + 1;
    }
    assert.deepEqual(ends, { ECONNRESET: 200 });
    // Each caller's TLS socket closed (the in-flight gauge drops on its 'close'), and each tunnelled connection.
    await waitFor('the in-flight upgrades to end', () => server.tunnel.establishedCount() === 0);
    assert.equal(await inFlight(), 0);
    assert.equal(kubelet.openSockets, 0);
  },
);
