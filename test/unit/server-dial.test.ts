// What the agent says when it cannot reach the tunnel server: the cause, not
// node:http2's wrapping of it ("The pending stream has been canceled"), and
// for the usual wrong addresses (the master port, a plain HTTP port, a server
// whose certificate another CA signed) what to do, with OpenSSL's text kept.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { test } from 'node:test';
import { createServer as createTlsServer } from 'node:tls';
import { dialServer } from '../../pkg/agent/server-dial.js';
import { issueCertificate } from '../../pkg/certs/pki.js';
import { silentLogger } from '../../pkg/log/logger.js';
import { ServerConnectionError } from '../../pkg/agent/errors.js';
import { harness, type Harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';

const AGENT_PORT = "agents connect to the server's --tunnel-agent-connect-port, 10262 by default";

function dialPort(port: number): Promise<unknown> {
  const pki = testPKI();
  const edge = pki.agent('edge-1', 'host=edge-1');
  return dialServer(
    {
      address: `127.0.0.1:${port}`,
      verifyName: '127.0.0.1',
      tls: { ca: pki.ca.cert, cert: edge.cert, key: edge.key },
      agentID: 'edge-1',
      identifiers: 'host=edge-1',
      receiveWindow: 1 << 20,
      connWindow: 1 << 20,
      halfClose: true,
      handshakeTimeoutMs: 10_000,
      resume: undefined,
    },
    silentLogger(),
  );
}

async function listen(h: Harness, server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(async () => {
    server.close();
    await once(server, 'close');
  });
  return (server.address() as AddressInfo).port;
}

test('a server that is not listening: the dial fails with connect ECONNREFUSED, said plainly', async () => {
  // A port that was just free: listen, note it, close.
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  probe.close();
  await once(probe, 'close');
  await assert.rejects(dialPort(port), (err: Error) => {
    assert.match(err.message, new RegExp(`^tunnel server 127\\.0\\.0\\.1:${port}: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}$`));
    return true;
  });
});

test('a TLS port without HTTP/2 (the master port): the agent is told to use the agent port, OpenSSL alert 120 kept as the cause', async (t) => {
  const h = harness(t);
  const pki = testPKI();
  // As the master port: TLS, HTTP/1.1 only.
  const port = await listen(
    h,
    createTlsServer({ cert: pki.server.cert, key: pki.server.key, ALPNProtocols: ['http/1.1'] }, (s) => s.destroy()),
  );
  await assert.rejects(dialPort(port), (err: Error) => {
    assert.ok(err instanceof ServerConnectionError);
    assert.equal(err.code, 'YT_ERR_CONNECT_FAILED');
    assert.equal(
      err.message,
      `tunnel server 127.0.0.1:${port}: answered TLS without HTTP/2 (h2): that is likely the server's master port (--secure-port, 10263 by default); ` +
        `${AGENT_PORT} (OpenSSL: tlsv1 alert no application protocol)`,
    );
    assert.equal((err.cause as { code?: string }).code, 'ERR_SSL_TLSV1_ALERT_NO_APPLICATION_PROTOCOL');
    assert.match((err.cause as Error).message, /SSL alert number 120/);
    return true;
  });
});

test('a plain HTTP port: the agent is told it reached no TLS port, OpenSSL "wrong version number" kept as the cause', async (t) => {
  const h = harness(t);
  const http = createHttpServer((_req, res) => res.end('ok'));
  const port = await listen(h, http);
  h.defer(() => http.closeAllConnections());
  await assert.rejects(dialPort(port), (err: Error) => {
    assert.ok(err instanceof ServerConnectionError);
    assert.equal(
      err.message,
      `tunnel server 127.0.0.1:${port}: answered without TLS (plain HTTP?): that is not the agent port (perhaps the server's --insecure-port, 10264, ` +
        `or its --meta-port, 10265); ${AGENT_PORT} (OpenSSL: wrong version number)`,
    );
    assert.equal((err.cause as { code?: string }).code, 'ERR_SSL_WRONG_VERSION_NUMBER');
    return true;
  });
});

test('a server whose certificate another CA signed: the agent says which certificate and CA it presented', async (t) => {
  const h = harness(t);
  const foreign = issueCertificate(testPKI().foreign.ca, { commonName: 'other-server', ips: ['127.0.0.1'], usages: ['serverAuth'] });
  const port = await listen(
    h,
    createTlsServer({ cert: foreign.cert, key: foreign.key, ALPNProtocols: ['h2'] }, (s) => s.destroy()),
  );
  await assert.rejects(dialPort(port), (err: Error) => {
    assert.ok(err instanceof ServerConnectionError);
    assert.equal(
      err.message,
      `tunnel server 127.0.0.1:${port}: presented a certificate for CN=other-server issued by CN=some-other-ca that the agent's CA ` +
        "(--ca-file; in cluster mode the cluster's CA) did not sign: give the agent the CA of the server's certificate " +
        "(in local mode the server's <cert-dir>/ca.crt), or point it at the right server (unable to verify the first certificate)",
    );
    assert.equal((err.cause as { code?: string }).code, 'UNABLE_TO_VERIFY_LEAF_SIGNATURE');
    return true;
  });
});
