// A connection must never come back into the tunnel through the server it
// came from (issue 35, item 1). The README's master-port curl without its
// Host header made the server take 127.0.0.1 for the node; the agent, on the
// same machine, dialled the master port again, and so on, until the server
// held gigabytes. Each guard is proven on its own:
// - the dial to one of the server's listeners (the real processes, as the
//   README runs them): 508 at once, RSS and descriptors flat, counted, logged
//   a few times at most;
// - the Via mark, for a port forward the addresses cannot show;
// - the bound on requests awaiting their answer, for a hop that drops the mark.

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer as createHTTPServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { LoopGuard } from '../../pkg/frontend/loop-guard.js';
import { Registry } from '../../pkg/metrics/prom.js';
import { OwnListeners } from '../../pkg/net/own-listeners.js';
import { harness, type Harness } from '../support/harness.js';
import { startMaster } from '../support/master.js';
import { metaGet } from '../support/meta-get.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { connectVia, startTunnel, tempDir, waitFor } from '../support/tunnel.js';
import { startTcpForward } from '../support/tcp-forward.js';
import { freeLowPort } from '../../hack/ports.js';

const LIMIT = { timeout: 60_000 };
/** An answer that does not come within this is a request that loops. */
const ANSWER_MS = 5000;

interface Answer {
  status: number;
  body: string;
}

function collect(res: IncomingMessage, resolve: (a: Answer) => void, reject: (err: Error) => void): void {
  let body = '';
  res.setEncoding('utf8');
  res.on('data', (c: string) => (body += c));
  res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
  res.on('error', reject);
}

/** GET `path` from 127.0.0.1:`port`, by default with the Host curl sends (127.0.0.1:port); TLS with `tls`. */
function get(port: number, path: string, tls?: { ca: string; cert: string; key: string }, host?: string): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const onAnswer = (res: IncomingMessage): void => collect(res, resolve, reject);
    const options = { host: '127.0.0.1', port, path, agent: false as const, headers: host === undefined ? {} : { Host: host } };
    const req = tls === undefined ? httpRequest(options, onAnswer) : httpsRequest({ ...options, ...tls }, onAnswer);
    req.setTimeout(ANSWER_MS, () => req.destroy(new Error(`no answer from 127.0.0.1:${port}${path} within ${ANSWER_MS} ms: the request loops`)));
    req.on('error', reject);
    req.end();
  });
}

/** The server process's resident memory (bytes) and open descriptors. */
function footprint(pid: number): { rss: number; fds: number } {
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
  return { rss: kb * 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
}

function metric(text: string, line: string): number {
  const m = new RegExp(`^${line.replace(/[{}"]/g, '\\$&')} (\\d+)$`, 'm').exec(text);
  return m === null ? 0 : Number(m[1]);
}

/** The README's local mode: server, issue-agent-cert, agent, all on this machine. */
async function readmeSetup(h: Harness): Promise<{ server: Proc; dir: string; udsPath: string; ports: Record<'secure' | 'insecure' | 'meta', number> }> {
  const dir = await tempDir(h);
  const udsPath = join(dir, 'proxier.sock');
  const agentPort = await freeLowPort();
  const server = startProcess(h, SERVER_BIN, [...localServerFlags({ certDir: join(dir, 'pki'), agentPort, udsPath }), '--startup-rehearsal=false']);
  const started = await server.waitForLine(/yurt-tunnel-server started/);
  const port = (name: string): number => Number(new RegExp(`${name}=(\\d+)`).exec(started)![1]);
  await issueAgentCertificate(join(dir, 'pki'), 'edge-1', join(dir, 'agent'));
  const agent = startProcess(h, AGENT_BIN, [
    ...localAgentFlags({ nodeName: 'edge-1', serverPort: agentPort, agentDir: join(dir, 'agent') }),
    '--startup-rehearsal=false',
  ]);
  await agent.waitForLine(/connected to tunnel server/);
  const ports = { secure: port('securePort'), insecure: port('insecurePort'), meta: port('metaPort') };
  await waitFor('the server to register edge-1', async () => (await metaGet(ports.meta, '/debug/agents')).body.includes('"edge-1"'));
  return { server, dir, udsPath, ports };
}

test("the README's master-port request without its Host header is refused at once, the server's footprint flat", LIMIT, async (t) => {
  const h = harness(t);
  const { server, dir, udsPath, ports } = await readmeSetup(h);
  const pid = server.child.pid!;
  const before = footprint(pid);
  const pki = join(dir, 'pki');
  const client = {
    ca: readFileSync(join(pki, 'ca.crt'), 'utf8'),
    cert: readFileSync(join(pki, 'tunnel-proxy-client.crt'), 'utf8'),
    key: readFileSync(join(pki, 'tunnel-proxy-client.key'), 'utf8'),
  };

  // curl --cacert pki/ca.crt --cert pki/tunnel-proxy-client.crt --key pki/tunnel-proxy-client.key https://127.0.0.1:10263/stats/summary
  const secure = await get(ports.secure, '/stats/summary', client);
  assert.equal(secure.status, 508, secure.body);
  assert.match(
    secure.body,
    new RegExp(`^dial to 127\\.0\\.0\\.1:${ports.secure} refused: it is this tunnel server's own secure master port .*agent edge-1 runs on this machine`),
  );
  assert.match(secure.body, /address the node itself \(its name, or its IP and kubelet port\)/);
  // The plain port needs no certificate at all.
  for (let i = 0; i < 7; i++) {
    const insecure = await get(ports.insecure, '/stats/summary');
    assert.equal(insecure.status, 508, insecure.body);
    assert.match(insecure.body, /own insecure master port/);
  }
  // Through the CONNECT proxier, the meta port is one of the server's listeners too.
  const viaConnect = await connectVia(udsPath, `127.0.0.1:${ports.meta}`);
  viaConnect.socket.destroy();
  assert.equal(viaConnect.status, 508, viaConnect.head);
  assert.match(viaConnect.head, /^HTTP\/1\.1 508 Loop Detected: dial to 127\.0\.0\.1:\d+ refused: it is this tunnel server's own meta port/);

  const metrics = (await metaGet(ports.meta, '/metrics')).body;
  assert.equal(metric(metrics, 'yurttunnel_server_loops_refused_total{check="own_listener"}'), 9);
  assert.equal(metric(metrics, 'yurttunnel_server_dial_failures_total{reason="YT_ERR_DIAL_LOOP"}'), 9);
  const connections = await metaGet(ports.meta, '/debug/connections');
  assert.deepEqual(JSON.parse(connections.body), [], 'nothing went into the tunnel');

  // Eight refusals on the master ports: a few lines, not eight (the rest are summed up later).
  const lines = server.lines.filter((l) => /request to kubelet failed/.test(l));
  assert.ok(lines.length >= 1 && lines.length <= 5, lines.join('\n'));
  // Generous bounds: the loop grew the server by ~20 MB and ~120 descriptors a second.
  await waitFor('the callers’ connections to close', () => footprint(pid).fds <= before.fds + 4, 5000);
  const after = footprint(pid);
  assert.ok(after.rss - before.rss < 30 * 1024 * 1024, `RSS grew from ${before.rss} to ${after.rss} bytes`);
});

/** An HTTP proxy to `port` on 127.0.0.1 that drops Via, as a hop that rebuilds requests may. */
async function viaDroppingProxy(h: Harness, port: number): Promise<number> {
  const proxy: Server = createHTTPServer((req, res) => {
    const headers = { ...req.headers };
    delete headers.via;
    const up = httpRequest({ host: '127.0.0.1', port, path: req.url, method: req.method, headers, agent: false }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    up.on('error', () => res.destroy());
    res.on('close', () => up.destroy());
    req.pipe(up);
  });
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  h.defer(async () => {
    proxy.closeAllConnections();
    proxy.close();
    await once(proxy, 'close');
  });
  return (proxy.address() as AddressInfo).port;
}

test('a request that comes back into a master port through a port forward is refused by its Via', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const registry = new Registry();
  const loopGuard = new LoopGuard(new OwnListeners(), registry);
  const { insecurePort, master } = await startMaster(h, server, { loopGuard });
  // A port forward: an address of the server it cannot know for its own.
  const { port: forward } = await startTcpForward(h, insecurePort);

  const answer = await get(insecurePort, '/stats/summary', undefined, `127.0.0.1:${forward}`);
  // The second hop refused it; the first passed that answer back as its kubelet's.
  assert.equal(answer.status, 508, answer.body);
  assert.match(answer.body, new RegExp(`^request for 127\\.0\\.0\\.1:${forward} refused: it already passed through a yurt-tunnel-server`));
  assert.equal(metric(await registry.metrics(), 'yurttunnel_server_loops_refused_total{check="via"}'), 1);
  await waitFor('the hops to end', () => master.connectionCount <= 1 && server.tunnel.pendingDialCount === 0);
});

test('a loop whose hop drops the Via mark ends at the bound on requests awaiting their answer', LIMIT, async (t) => {
  const h = harness(t);
  const { server } = await startTunnel(h);
  const registry = new Registry();
  const loopGuard = new LoopGuard(new OwnListeners(), registry);
  const { insecurePort, interceptor } = await startMaster(h, server, { loopGuard, maxAwaitingPerDestination: 8 });
  const proxy = await viaDroppingProxy(h, insecurePort);

  const answer = await get(insecurePort, '/stats/summary', undefined, `127.0.0.1:${proxy}`);
  // The ninth hop found eight awaiting their answer; its 503 came back through all of them.
  assert.equal(answer.status, 503, answer.body);
  assert.match(answer.body, new RegExp(`^8 requests to 127\\.0\\.0\\.1:${proxy} already await its answer: .*loop back into a tunnel server`));
  assert.equal(metric(await registry.metrics(), 'yurttunnel_server_loops_refused_total{check="waiting"}'), 1);
  await waitFor('every hop to have its answer', () => interceptor.awaitingCount === 0);
});
