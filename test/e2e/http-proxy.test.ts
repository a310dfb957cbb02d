// The HTTP proxy port (--http-proxy-port) of a real server, with an agent:
// absolute-URI requests forwarded in origin form with their Host, CONNECT
// tunnelled, both routed by node name; callers without a client certificate
// refused; a port outside the allow-list 403 with its reason (one log line
// for many); an unknown node 400; a CONNECT back into the server 508.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage } from 'node:http';
import { request } from 'node:https';
import { join } from 'node:path';
import { test } from 'node:test';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { startTestAgent } from '../support/cluster.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { metaGet } from '../support/meta-get.js';
import { testServerOptions } from '../support/server-options.js';
import { closedPort, readAll, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';

interface ClientTLS {
  ca: string;
  cert: string;
  key: string;
}

/** A target that answers with what it received, and `size` bytes of body when asked for /big. */
async function startEchoHTTP(h: Harness): Promise<number> {
  const server = createServer((req, res) => {
    if (req.url === '/big') {
      res.end(Buffer.alloc(4 * 1024 * 1024, 'x'));
      return;
    }
    res.setHeader('Content-Type', 'application/json');
    res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(() => new Promise<void>((resolve) => server.close(() => resolve())));
  h.defer(() => server.closeAllConnections());
  return (server.address() as { port: number }).port;
}

async function startProxyPair(h: Harness, allowed: (targetPorts: { http: number; echo: number }) => number[], proxyPort = 0) {
  const dir = await tempDir(h);
  const log = new MemoryLogger(2);
  const http = await startEchoHTTP(h);
  const echo = await startEchoServer(h);
  const server = await TunnelServer.start(
    testServerOptions(dir, { httpProxyPort: proxyPort, httpProxyAllowedPorts: allowed({ http, echo: echo.port }), metaPort: 0, logger: log }),
  );
  h.defer(() => server.stop());
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'edge-1', outDir: agentDir, nodeIPs: ['127.0.0.1'] });
  await startTestAgent(h, server, { nodeName: 'edge-1', certDir: agentDir });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  // The caller's client certificate, from the CA --client-ca-file defaults to in local mode.
  const files = await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'prometheus', outDir: join(dir, 'client') });
  const client: ClientTLS = {
    ca: await readFile(files.caFile, 'utf8'),
    cert: await readFile(files.certFile, 'utf8'),
    key: await readFile(files.keyFile, 'utf8'),
  };
  return { server, log, client, http, echo, proxyPort: server.master.address('proxy').port };
}

/** An absolute-URI request through the proxy. */
function viaProxy(
  proxyPort: number,
  tls: Partial<ClientTLS>,
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingMessage['headers']; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: proxyPort, path: url, headers: { Host: new URL(url).host, ...headers }, servername: 'localhost', agent: false, ...tls },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** CONNECT through the proxy: the status line, and the TLS socket for what follows. */
async function connectThrough(
  proxyPort: number,
  tls: ClientTLS,
  target: string,
): Promise<{ statusLine: string; head: string; socket: TLSSocket; rest: Buffer }> {
  const socket = tlsConnect({ host: '127.0.0.1', port: proxyPort, servername: 'localhost', ...tls });
  await once(socket, 'secureConnect');
  socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  let buf = Buffer.alloc(0);
  while (buf.indexOf('\r\n\r\n') < 0) {
    const [chunk] = (await once(socket, 'data')) as [Buffer];
    buf = Buffer.concat([buf, chunk]);
  }
  const end = buf.indexOf('\r\n\r\n') + 4;
  const head = buf.subarray(0, end).toString('latin1');
  return { statusLine: head.split('\r\n')[0]!, head, socket, rest: buf.subarray(end) };
}

test('an absolute-URI request by node name is forwarded in origin form with its Host, hop-by-hop headers dropped, the answer streamed back', async (t) => {
  const h = harness(t);
  const { client, http, proxyPort, server } = await startProxyPair(h, (p) => [p.http]);
  const answer = await viaProxy(proxyPort, client, `http://edge-1:${http}/metrics?x=1`, {
    'Proxy-Connection': 'keep-alive',
    'Proxy-Authorization': 'Bearer secret',
    'X-Scrape': 'yes',
    // The URI's authority, not a Host that disagrees with it, is what the target gets (RFC 9112 §3.2.2).
    Host: 'elsewhere:1',
  });
  assert.equal(answer.status, 200);
  const seen = JSON.parse(answer.body.toString()) as { method: string; url: string; headers: Record<string, string> };
  assert.equal(seen.method, 'GET');
  assert.equal(seen.url, '/metrics?x=1');
  assert.equal(seen.headers.host, `edge-1:${http}`);
  assert.equal(seen.headers['x-scrape'], 'yes');
  assert.equal(seen.headers['proxy-connection'], undefined);
  assert.equal(seen.headers['proxy-authorization'], undefined);
  assert.match(seen.headers.via!, /1\.1 yurt-tunnel-server/);
  // A body larger than any buffer on the way arrives whole.
  const big = await viaProxy(proxyPort, client, `http://edge-1:${http}/big`);
  assert.equal(big.status, 200);
  assert.equal(big.body.length, 4 * 1024 * 1024);
  const metrics = (await metaGet(server.meta!.address.port, '/metrics')).body;
  assert.match(metrics, /yurttunnel_server_http_proxy_requests_total\{method="other",result="forwarded"\} 2\n/);
});

test('CONNECT to a node name is tunnelled to the node, bytes both ways', async (t) => {
  const h = harness(t);
  const { client, echo, proxyPort } = await startProxyPair(h, (p) => [p.echo]);
  const c = await connectThrough(proxyPort, client, `edge-1:${echo.port}`);
  h.defer(() => c.socket.destroy());
  assert.equal(c.statusLine, 'HTTP/1.1 200 Connection Established');
  const payload = Buffer.alloc(1024 * 1024, 7);
  c.socket.write(payload);
  assert.ok((await readExactly(c.socket, payload.length, c.rest)).equals(payload));
  c.socket.end();
  await readAll(c.socket);
});

test('a CONNECT that would come back into the server (its own proxy port, allowed by mistake) is 508 Loop Detected', async (t) => {
  const h = harness(t);
  const port = await closedPort();
  const { client, proxyPort } = await startProxyPair(h, () => [port], port);
  const c = await connectThrough(proxyPort, client, `127.0.0.1:${proxyPort}`);
  h.defer(() => c.socket.destroy());
  assert.match(c.statusLine, /^HTTP\/1\.1 508 Loop Detected: dial to 127\.0\.0\.1:\d+ refused: it is this tunnel server's own HTTP proxy port/);
});

test('a port outside the allow-list is 403 with its reason, logged once for many; an unknown node is 400; no client certificate, no proxy', async (t) => {
  const h = harness(t);
  const { client, http, echo, proxyPort, log, server } = await startProxyPair(h, () => [9100]);
  for (let i = 0; i < 20; i++) {
    const refused = await viaProxy(proxyPort, client, `http://edge-1:${http}/metrics`);
    assert.equal(refused.status, 403);
    assert.equal(
      refused.body.toString(),
      `port ${http} of edge-1 is not open to the HTTP proxy: allowed ports are 9100 (--http-proxy-allowed-ports, or http-proxy-allowed-ports in the server ConfigMap)\n`,
    );
  }
  const c = await connectThrough(proxyPort, client, `edge-1:${echo.port}`);
  h.defer(() => c.socket.destroy());
  assert.match(c.statusLine, new RegExp(`^HTTP/1\\.1 403 Forbidden: port ${echo.port} of edge-1 is not open to the HTTP proxy`));
  const refusals = log.records.filter((r) => r.message === 'HTTP proxy request refused');
  assert.ok(refusals.length >= 1 && refusals.length <= 5, `${refusals.length} lines for 21 refusals`);

  const unknown = await viaProxy(proxyPort, client, 'http://edge-9:9100/metrics');
  assert.equal(unknown.status, 400);
  assert.match(unknown.body.toString(), /^node "edge-9" is not known to the tunnel server: no connected agent advertises it\n$/);

  const https = await viaProxy(proxyPort, client, 'https://edge-1:9100/metrics');
  assert.equal(https.status, 400);
  assert.match(https.body.toString(), /for an https target use CONNECT/);
  await assert.rejects(viaProxy(proxyPort, { ca: client.ca }, 'http://edge-1:9100/metrics'), /certificate|socket hang up|ECONNRESET/);

  const metrics = (await metaGet(server.meta!.address.port, '/metrics')).body;
  assert.match(metrics, /yurttunnel_server_http_proxy_requests_total\{method="other",result="port_not_allowed"\} 20\n/);
  assert.match(metrics, /yurttunnel_server_http_proxy_requests_total\{method="connect",result="port_not_allowed"\} 1\n/);
  assert.match(metrics, /yurttunnel_server_http_proxy_requests_total\{method="other",result="bad_request"\} 2\n/);
  assert.match(metrics, /yurttunnel_server_refused_callers_total\{listener="http_proxy",reason="tls_error"\} 1\n/);
});
