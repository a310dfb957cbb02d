// The client certificate a load balancer forwards when it terminates the
// agent's TLS (issue 37 item 2): believed only from --trusted-proxy-cidrs,
// verified against the agent CA as a direct one is; a forwarded certificate
// from any other peer is refused; and a peer without a valid certificate of
// its own gets in only from a trusted proxy. Loopback: the "proxy" dials from
// 127.0.0.2, everyone else from 127.0.0.1.

import assert from 'node:assert/strict';
import type { IncomingMessage } from 'node:http';
import { test } from 'node:test';
import WebSocket from 'ws';
import type { CertKeyPair } from '../../pkg/certs/pki.js';
import { harness, type Harness } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { testPKI } from '../support/pki.js';
import { startServer, waitFor, type TestServer } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };
const PROXY = '127.0.0.2';

type Outcome = { opened: true } | { opened: false; status: number | undefined; grpcStatus?: string; grpcMessage?: string; error?: string };

/** A WebSocket upgrade as an agent (or a load balancer) sends it, from `from`, with `cert` or none. */
async function upgrade(h: Harness, server: TestServer, from: string, cert: CertKeyPair | undefined, headers: Record<string, string>): Promise<Outcome> {
  const ws = new WebSocket(`wss://127.0.0.1:${server.endpoint.address.port}/`, {
    ca: testPKI().ca.cert,
    ...(cert ?? {}),
    localAddress: from,
    headers: { agentid: 'edge-1', ...headers },
  });
  h.defer(() => ws.terminate());
  return new Promise<Outcome>((resolve) => {
    ws.once('open', () => resolve({ opened: true }));
    ws.once('unexpected-response', (_req, res: IncomingMessage) => {
      res.resume();
      resolve({
        opened: false,
        status: res.statusCode,
        grpcStatus: res.headers['grpc-status'] as string | undefined,
        grpcMessage: decodeURIComponent(String(res.headers['grpc-message'] ?? '')),
      });
    });
    ws.on('error', (err) => resolve({ opened: false, status: undefined, error: err.message }));
  });
}

const escaped = (pem: string): string => encodeURIComponent(pem);

test('a forwarded client certificate is believed from a trusted proxy only, and verified against the agent CA', LIMIT, async (t) => {
  const h = harness(t);
  const log = captureLog('text');
  const server = await startServer(h, { endpoint: { trustedProxyCIDRs: [`${PROXY}/32`], logger: log.logger } });
  const pki = testPKI();
  const edge1 = pki.agent('edge-1');

  // From the trusted proxy, no certificate of its own, edge-1's forwarded: edge-1 joins, as its certificate says.
  const joined = await upgrade(h, server, PROXY, undefined, { 'x-ssl-client-cert': escaped(edge1.cert) });
  assert.deepEqual(joined, { opened: true });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.match(server.tunnel.registry.all()[0]!.certSubject, /DNS:edge-1/);

  // The identity check applies to the forwarded certificate as to a direct one.
  const impostor = await upgrade(h, server, PROXY, undefined, { agentid: 'edge-2', 'x-ssl-client-cert': escaped(edge1.cert) });
  assert.equal(impostor.opened, false);
  assert.equal((impostor as { status: number }).status, 403);

  // Signed by another CA: refused.
  const foreign = await upgrade(h, server, PROXY, undefined, { 'x-ssl-client-cert': escaped(pki.foreign.client.cert) });
  assert.deepEqual(foreign, {
    opened: false,
    status: 401,
    grpcStatus: '16',
    grpcMessage: 'the forwarded certificate is not signed by the agent CA (header x-ssl-client-cert)',
  });

  // Not a certificate at all.
  const garbage = await upgrade(h, server, PROXY, undefined, { 'x-ssl-client-cert': 'not%20a%20PEM' });
  assert.equal((garbage as { status: number }).status, 401);

  // From the trusted proxy with nothing forwarded and no certificate of its own: no identity, refused.
  const none = await upgrade(h, server, PROXY, undefined, {});
  assert.equal((none as { status: number }).status, 401);
  assert.match(
    (none as { grpcMessage: string }).grpcMessage,
    /^no client certificate: the trusted proxy 127\.0\.0\.2:\d+ presented no valid one and forwarded none in x-ssl-client-cert$/,
  );

  // A forwarded certificate from a peer outside --trusted-proxy-cidrs, even one with a valid certificate of its own: refused.
  const untrusted = await upgrade(h, server, '127.0.0.1', pki.agent('edge-3'), { agentid: 'edge-3', 'x-ssl-client-cert': escaped(edge1.cert) });
  assert.equal(untrusted.opened, false);
  assert.equal((untrusted as { status: number }).status, 403);
  assert.match((untrusted as { grpcMessage: string }).grpcMessage, /believed only from --trusted-proxy-cidrs, and 127\.0\.0\.1:\d+ is not among them/);
  assert.ok(log.lines().some((l) => l.includes('agent call rejected') && l.includes('trusted-proxy-cidrs')));

  // A direct client without a certificate, from anywhere else: refused as TLS refuses it without trusted proxies.
  const bare = await upgrade(h, server, '127.0.0.1', undefined, {});
  assert.equal(bare.opened, false);
  assert.equal((bare as { status: number | undefined }).status, undefined, 'no HTTP answer: the connection is closed');
  await waitFor('the refusal line', () => log.lines().some((l) => l.includes('agent TLS handshake failed; connection refused')));

  // A direct agent with its own certificate joins as ever.
  const direct = await upgrade(h, server, '127.0.0.1', pki.agent('edge-4'), { agentid: 'edge-4' });
  assert.deepEqual(direct, { opened: true });
  await waitFor('edge-4 to register', () => server.tunnel.registry.agentCount === 2);
});

test('without --trusted-proxy-cidrs no forwarded certificate is believed, from anywhere', LIMIT, async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const pki = testPKI();
  const forwarded = await upgrade(h, server, PROXY, pki.agent('edge-3'), { agentid: 'edge-3', 'x-ssl-client-cert': escaped(pki.agent('edge-1').cert) });
  assert.equal((forwarded as { status: number }).status, 403);
  // And the handshake itself still demands a client certificate.
  const bare = await upgrade(h, server, PROXY, undefined, { 'x-ssl-client-cert': escaped(pki.agent('edge-1').cert) });
  assert.equal(bare.opened, false);
  assert.equal((bare as { status: number | undefined }).status, undefined);
  assert.equal(server.tunnel.registry.agentCount, 0);
});
