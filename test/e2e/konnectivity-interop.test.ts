// Interop with the real Konnectivity v0.30 Go binaries (shared/konnectivity/
// proxy-server and proxy-agent, found by hack/konnectivity.ts), both ways. A grpc-js
// peer built from our .proto files proves the bytes; these prove the
// behaviour around them: Go's x509 parser, grpc-go's BDP pings and keepalive
// policy, Go's HTTP/2 flow control, the Go agent's sync loop.

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { get } from 'node:http';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { harness, type Harness } from '../support/harness.js';
import { findKonnectivity, goAgentArgs, goServerArgs } from '../../hack/konnectivity.js';
import { freeLowPort } from '../../hack/ports.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { closedPort, connectVia, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';
import { egressDial } from '../support/egress-client.js';
import { GrpcStatus } from '../../pkg/grpc/status.js';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';

const bins = findKonnectivity();
const SKIP = { skip: typeof bins === 'string' ? bins : false, timeout: 120_000 };
const MiB = 1024 * 1024;

function sha256(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** A target that sends `size` pseudo-random bytes to each connection, then ends it; resolves with their hash. */
async function startSource(h: Harness, size: number, host = '127.0.0.1'): Promise<{ port: number; hash: string }> {
  const block = randomBytes(MiB);
  const hash = createHash('sha256');
  for (let sent = 0; sent < size; sent += MiB) hash.update(block.subarray(0, Math.min(MiB, size - sent)));
  const server = createServer((s: Socket) => {
    s.on('error', () => {});
    let sent = 0;
    const pump = (): void => {
      while (sent < size) {
        const n = Math.min(MiB, size - sent);
        sent += n;
        if (!s.write(block.subarray(0, n))) return;
      }
      s.end();
    };
    s.on('drain', pump);
    pump();
  });
  server.listen(0, host);
  await once(server, 'listening');
  h.defer(() => new Promise((r) => server.close(r)));
  return { port: (server.address() as AddressInfo).port, hash: hash.digest('hex') };
}

/** Reads a tunnelled socket to its end; returns the byte count and hash. */
async function drain(socket: Socket, initial: Buffer): Promise<{ bytes: number; hash: string }> {
  const hash = createHash('sha256').update(initial);
  let bytes = initial.length;
  socket.on('data', (c: Buffer) => {
    bytes += c.length;
    hash.update(c);
  });
  socket.resume();
  await once(socket, 'close');
  return { bytes, hash: hash.digest('hex') };
}

/** The last keepalive round trip of the one agent on the server whose meta server is at `port`. */
async function keepaliveRoundTrip(port: number): Promise<number | null> {
  const body = await new Promise<string>((resolve, reject) => {
    get({ host: '127.0.0.1', port, path: '/debug/agents', agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
  const agents = JSON.parse(body) as Array<{ lastKeepaliveRoundTripMs: number | null }>;
  assert.equal(agents.length, 1, body);
  return agents[0]!.lastKeepaliveRoundTripMs;
}

interface OurServer {
  proc: Proc;
  dir: string;
  certDir: string;
  udsPath: string;
  agentPort: number;
  /** Writes an agent's ca.crt/tls.crt/tls.key with `issue-agent-cert`; returns the folder. */
  issueAgentCert(nodeName: string, nodeIPs: string): Promise<string>;
}

async function startOurServer(h: Harness, extra: string[] = []): Promise<OurServer> {
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  const udsPath = join(dir, 'proxier.sock');
  const agentPort = await freeLowPort();
  const proc = startProcess(h, SERVER_BIN, [...localServerFlags({ certDir, agentPort, udsPath }), '--v', '2', ...extra]);
  await proc.waitForLine(/yurt-tunnel-server started/);
  return {
    proc,
    dir,
    certDir,
    udsPath,
    agentPort,
    async issueAgentCert(nodeName, nodeIPs) {
      const out = join(dir, `agent-${nodeName}`);
      await issueAgentCertificate(certDir, nodeName, out, nodeIPs);
      return out;
    },
  };
}

async function startGoAgent(h: Harness, agentDir: string, serverPort: number, agentID: string, identifiers: string, extra: string[] = []): Promise<Proc> {
  if (typeof bins === 'string') throw new Error(bins);
  const agent = startProcess(
    h,
    bins.proxyAgent,
    goAgentArgs(agentDir, serverPort, agentID, identifiers, await freeLowPort(), await freeLowPort(), extra),
    {},
    { node: false },
  );
  await agent.waitForLine(/"Start serving"/, 20_000);
  return agent;
}

test('Go agent → our server: 16 MiB echo, then 256 MiB download, byte-exact, and never a GOAWAY', SKIP, async (t) => {
  const h = harness(t);
  const server = await startOurServer(h);
  const agentDir = await server.issueAgentCert('edge-1', '127.0.0.1');
  await startGoAgent(h, agentDir, server.agentPort, 'edge-1', 'host=edge-1&ipv4=127.0.0.1');
  await server.proc.waitForLine(/agent connected agentID=edge-1/);

  const echo = await startEchoServer(h);
  const payload = randomBytes(16 * MiB);
  const e = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(e.status, 200, e.head);
  e.socket.write(payload);
  const back = await readExactly(e.socket, payload.length, e.rest);
  assert.equal(sha256(back), sha256(payload));
  e.socket.destroy();

  const source = await startSource(h, 256 * MiB);
  const d = await connectVia(server.udsPath, `127.0.0.1:${source.port}`);
  assert.equal(d.status, 200, d.head);
  const got = await drain(d.socket, d.rest);
  assert.equal(got.bytes, 256 * MiB);
  assert.equal(got.hash, source.hash);
  assert.deepEqual(
    server.proc.lines.filter((l) => /too_many_pings|pings too often|agent disconnected/.test(l)),
    [],
  );
});

test('Go agent → our server: a refused dial is 502, 200 concurrent connections are byte-exact, an idle link outlives our keepalive pings', SKIP, async (t) => {
  const h = harness(t);
  const server = await startOurServer(h, ['--keepalive-time', '1s']);
  const agentDir = await server.issueAgentCert('edge-1', '127.0.0.1');
  // The Go agent keeps its own keepalive (1 h): below grpc-go's floor of 10 s it would be clamped to 10 s, and
  // pings every 10 s with nothing sent back earn GOAWAY too_many_pings after ~40 s, from Konnectivity's server as from ours.
  await startGoAgent(h, agentDir, server.agentPort, 'edge-1', 'host=edge-1&ipv4=127.0.0.1');
  await server.proc.waitForLine(/agent connected agentID=edge-1/);

  const refused = await connectVia(server.udsPath, `127.0.0.1:${await closedPort()}`);
  assert.equal(refused.status, 502, refused.head);
  assert.match(refused.rest.toString(), /connection refused/);

  const echo = await startEchoServer(h);
  const results = await Promise.all(
    Array.from({ length: 200 }, async (_, i) => {
      const r = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
      assert.equal(r.status, 200, r.head);
      const msg = Buffer.alloc(32 * 1024, i % 251);
      r.socket.write(msg);
      const back = await readExactly(r.socket, msg.length, r.rest);
      r.socket.destroy();
      return back.equals(msg);
    }),
  );
  assert.equal(results.filter(Boolean).length, 200);

  // Nothing to carry: the link stays up while the Go agent answers three more of our keepalive pings
  // (each answer changes the round trip the meta server shows).
  const metaPort = Number(/metaPort=(\d+)/.exec(await server.proc.waitForLine(/yurt-tunnel-server started/))![1]);
  let last = await keepaliveRoundTrip(metaPort);
  let answered = 0;
  await waitFor(
    'three keepalive pings answered on the idle link',
    async () => {
      const now = await keepaliveRoundTrip(metaPort);
      if (now !== last) answered++;
      last = now;
      return answered >= 3;
    },
    15_000,
  );
  const after = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(after.status, 200, after.head);
  after.socket.write('still there');
  assert.equal((await readExactly(after.socket, 11, after.rest)).toString(), 'still there');
  after.socket.destroy();
  assert.deepEqual(
    server.proc.lines.filter((l) => /too_many_pings|pings too often|agent disconnected/.test(l)),
    [],
  );
});

test('Go agent killed → our server closes its clients within a second', SKIP, async (t) => {
  const h = harness(t);
  const server = await startOurServer(h);
  const agentDir = await server.issueAgentCert('edge-1', '127.0.0.1');
  const agent = await startGoAgent(h, agentDir, server.agentPort, 'edge-1', 'host=edge-1&ipv4=127.0.0.1');
  await server.proc.waitForLine(/agent connected agentID=edge-1/);
  const echo = await startEchoServer(h);
  const clients = await Promise.all(Array.from({ length: 5 }, () => connectVia(server.udsPath, `127.0.0.1:${echo.port}`)));
  for (const c of clients) {
    assert.equal(c.status, 200);
    c.socket.write('x');
    await readExactly(c.socket, 1, c.rest);
    c.socket.resume();
  }
  const killedAt = performance.now();
  agent.kill('SIGKILL');
  await waitFor('every client closed', () => clients.every((c) => c.socket.destroyed), 1000);
  assert.ok(performance.now() - killedAt < 1000);
});

test("one Go agent and one of ours on our server: each node's traffic reaches its own agent", SKIP, async (t) => {
  const h = harness(t);
  const server = await startOurServer(h);
  const goDir = await server.issueAgentCert('edge-go', '127.0.0.2');
  const tsDir = await server.issueAgentCert('edge-ts', '127.0.0.3');
  await startGoAgent(h, goDir, server.agentPort, 'edge-go', 'host=edge-go&ipv4=127.0.0.2');
  const ours = startProcess(h, AGENT_BIN, [
    ...localAgentFlags({ nodeName: 'edge-ts', nodeIP: '127.0.0.3', serverPort: server.agentPort, agentDir: tsDir }),
    '--v',
    '3',
  ]);
  await ours.waitForLine(/connected to tunnel server/);
  await waitFor('both agents', () => server.proc.lines.filter((l) => /agent connected/.test(l)).length === 2, 10_000);

  // Each target answers with the name of the address it listens on.
  const targets = new Map<string, number>();
  for (const ip of ['127.0.0.2', '127.0.0.3']) {
    const srv = createServer((s) => s.end(`served on ${ip}`));
    srv.listen(0, ip);
    await once(srv, 'listening');
    h.defer(() => new Promise((r) => srv.close(r)));
    targets.set(ip, (srv.address() as AddressInfo).port);
  }
  for (const [ip, port] of targets) {
    const r = await connectVia(server.udsPath, `${ip}:${port}`);
    assert.equal(r.status, 200, r.head);
    assert.equal((await drain(r.socket, r.rest)).bytes, `served on ${ip}`.length);
  }
  // Our agent logged its one connection; the Go agent carried the other.
  await waitFor('our agent to log its connection', () => ours.lines.some((l) => /connection established.*127\.0\.0\.3/.test(l)));
  assert.equal(
    ours.lines.some((l) => /127\.0\.0\.2/.test(l)),
    false,
  );
});

test(
  'a target reset: through our agent the egress caller is told (CLOSE_RSP error, UNAVAILABLE); through the Go agent it is a plain close, all it can say',
  SKIP,
  async (t) => {
    const h = harness(t);
    const dir = await tempDir(h);
    const egressPath = join(dir, 'egress.sock');
    const server = await startOurServer(h, ['--egress-selector-enable', '--egress-selector-uds', egressPath, '--egress-selector-mode', 'grpc']);
    const goDir = await server.issueAgentCert('edge-go', '127.0.0.2');
    const tsDir = await server.issueAgentCert('edge-ts', '127.0.0.3');
    await startGoAgent(h, goDir, server.agentPort, 'edge-go', 'host=edge-go&ipv4=127.0.0.2');
    startProcess(h, AGENT_BIN, [...localAgentFlags({ nodeName: 'edge-ts', nodeIP: '127.0.0.3', serverPort: server.agentPort, agentDir: tsDir })]);
    await waitFor('both agents', () => server.proc.lines.filter((l) => /agent connected/.test(l)).length === 2, 10_000);
    // Each target sends a little, then resets the connection when the caller speaks.
    const ports = new Map<string, number>();
    for (const ip of ['127.0.0.2', '127.0.0.3']) {
      const srv = createServer((s) => {
        s.on('error', () => {});
        s.write('partial');
        s.once('data', () => s.resetAndDestroy());
      });
      srv.listen(0, ip);
      await once(srv, 'listening');
      h.defer(() => new Promise((r) => srv.close(r)));
      ports.set(ip, (srv.address() as AddressInfo).port);
    }
    const cutThrough = async (ip: string): Promise<{ code: number; details: string; closeError: string | undefined }> => {
      const call = await egressDial(h, egressPath, `${ip}:${ports.get(ip)}`);
      await waitFor('the first bytes', () => call.received().length > 0);
      call.call.write({ type: 'DATA', data: { connectID: call.connectID, error: '', data: Buffer.from('go on') } });
      const status = await call.status;
      assert.equal(call.received().toString(), 'partial');
      return { code: status.code, details: status.details, closeError: call.closeResponse()?.error };
    };
    const ours = await cutThrough('127.0.0.3');
    assert.equal(ours.code, GrpcStatus.UNAVAILABLE, ours.details);
    assert.match(ours.closeError ?? '', /ECONNRESET/);
    const go = await cutThrough('127.0.0.2');
    assert.deepEqual(go, { code: GrpcStatus.OK, details: '', closeError: '' });
  },
);

/** Waits until the Go server's /readyz says it holds an agent (it answers 500 "No connection to any proxy agent" until then). */
async function goServerReady(healthPort: number): Promise<void> {
  await waitFor(
    'the Go server to register our agent',
    async () => {
      const status = await new Promise<number>((resolve) => {
        get(`http://127.0.0.1:${healthPort}/readyz`, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        }).on('error', () => resolve(0));
      });
      return status === 200;
    },
    10_000,
  );
}

test('our agent → Go server: echo, download, a refused dial, and back after the Go server restarts', SKIP, async (t) => {
  if (typeof bins === 'string') return;
  const h = harness(t);
  const dir = await tempDir(h);
  const certDir = join(dir, 'pki');
  // Our local CA makes the Go server's certificate (IP SAN 127.0.0.1) and our agent's.
  const { ensureLocalServerCertificates, writeAgentCertificate } = await import('../../pkg/certs/local-store.js');
  await ensureLocalServerCertificates({ certDir });
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir, nodeName: 'edge-1', nodeIPs: ['127.0.0.1'], outDir: agentDir });
  const udsPath = join(dir, 'go.sock');
  const ports = { agentPort: await freeLowPort(), healthPort: await freeLowPort(), adminPort: await freeLowPort() };
  const startGoServer = async (): Promise<Proc> => {
    const p = startProcess(h, bins.proxyServer, goServerArgs(certDir, udsPath, ports), {}, { node: false });
    await p.waitForLine(/Starting agent server for tunnel connections/, 20_000);
    return p;
  };
  let goServer = await startGoServer();
  const agent = startProcess(h, AGENT_BIN, [
    ...localAgentFlags({ nodeName: 'edge-1', serverPort: ports.agentPort, agentDir }),
    '--sync-interval',
    '200ms',
    '--sync-interval-cap',
    '1s',
    '--v',
    '2',
  ]);
  await agent.waitForLine(/connected to tunnel server/);
  // Our agent has its response headers before the Go server has registered it as a backend.
  await goServerReady(ports.healthPort);

  const echo = await startEchoServer(h);
  const e = await connectVia(udsPath, `127.0.0.1:${echo.port}`);
  // v0.30 answers "200 OK" (chunked) before it dials.
  assert.match(e.head, /^HTTP\/1\.1 200 OK\r\n/);
  const msg = randomBytes(4 * MiB);
  e.socket.write(msg);
  assert.equal(sha256(await readExactly(e.socket, msg.length, e.rest)), sha256(msg));
  e.socket.destroy();

  const source = await startSource(h, 64 * MiB);
  const d = await connectVia(udsPath, `127.0.0.1:${source.port}`);
  const got = await drain(d.socket, d.rest);
  assert.equal(got.bytes, 64 * MiB);
  assert.equal(got.hash, source.hash);

  // A refused dial: v0.30 has already said 200, so it appends a second status line with our agent's reason, and closes.
  const refusedPort = await closedPort();
  const r = await connectVia(udsPath, `127.0.0.1:${refusedPort}`);
  assert.match(r.head, /^HTTP\/1\.1 200 OK\r\n/);
  const body: Buffer[] = [r.rest];
  r.socket.on('data', (c: Buffer) => body.push(c));
  await drain(r.socket, Buffer.alloc(0));
  assert.equal(Buffer.concat(body).toString(), `HTTP/0.0 503 Service Unavailable\r\n\r\ndial tcp 127.0.0.1:${refusedPort}: connect: connection refused`);

  // A target that resets: our agent says so in CLOSE_RSP's error, which the Go server takes (it closes the client).
  const resetting = createServer((s) => {
    s.on('error', () => {});
    s.write('partial');
    s.once('data', () => s.resetAndDestroy());
  });
  resetting.listen(0, '127.0.0.1');
  await once(resetting, 'listening');
  h.defer(() => new Promise((r) => resetting.close(r)));
  const cut = await connectVia(udsPath, `127.0.0.1:${(resetting.address() as AddressInfo).port}`);
  const cutBytes: Buffer[] = [cut.rest];
  cut.socket.on('data', (c: Buffer) => cutBytes.push(c)).resume();
  await waitFor('the first bytes', () => Buffer.concat(cutBytes).toString() === 'partial');
  cut.socket.write('go on');
  await once(cut.socket, 'close');
  assert.equal(Buffer.concat(cutBytes).toString(), 'partial');
  await agent.waitForLine(/connection ended .*ended=ECONNRESET/);

  goServer.kill('SIGKILL');
  await goServer.exited;
  await agent.waitForLine(/lost connection to tunnel server/);
  goServer = await startGoServer();
  await waitFor('our agent back', () => agent.lines.filter((l) => /connected to tunnel server/.test(l)).length === 2, 15_000);
  await goServerReady(ports.healthPort);
  const again = await connectVia(udsPath, `127.0.0.1:${echo.port}`);
  again.socket.write('after restart');
  assert.equal((await readExactly(again.socket, 13, again.rest)).toString(), 'after restart');
  again.socket.destroy();
});

test("a stalled reader behind a Go agent is closed after --stalled-connection-timeout; the agent's other dials flow", SKIP, async (t) => {
  const h = harness(t);
  const server = await startOurServer(h, ['--stalled-connection-timeout', '1s']);
  const agentDir = await server.issueAgentCert('edge-1', '127.0.0.1');
  await startGoAgent(h, agentDir, server.agentPort, 'edge-1', 'host=edge-1&ipv4=127.0.0.1');
  await server.proc.waitForLine(/agent connected agentID=edge-1/);
  const source = await startSource(h, 512 * MiB);
  const stalled = await connectVia(server.udsPath, `127.0.0.1:${source.port}`);
  assert.equal(stalled.status, 200, stalled.head);
  stalled.socket.pause();
  const echo = await startEchoServer(h);
  const other = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(other.status, 200, other.head);
  other.socket.write('flowing');
  assert.equal((await readExactly(other.socket, 7, other.rest)).toString(), 'flowing');
  other.socket.destroy();
  await server.proc.waitForLine(/closed a stalled connection .*reason=YT_ERR_CONN_STALLED/);
  stalled.socket.destroy();
});
