// The agent through an https:// proxy, on loopback: TLS to the proxy, CONNECT
// inside it, then the agent's own TLS to the server inside that (TLS in TLS).
// The proxy (test/support/connect-proxy.ts) has a certificate from its own CA,
// which the agent trusts only when given it (--proxy-ca-file; ProxyServer.ca
// here). Over gRPC and over a WebSocket the agent joins and 4 MiB cross
// byte-exact; a wrong password is the proxy's 407 in one warning; a proxy
// certificate the agent does not trust is one warning naming the proxy (not
// the server), and nothing is sent to the proxy in plain text. squid's
// https_port is in agent-proxies.test.ts.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { ProxyError } from '../../pkg/agent/errors.js';
import { NoProxy } from '../../pkg/agent/proxy/no-proxy.js';
import { openServerSocket } from '../../pkg/agent/proxy/open-server-socket.js';
import { parseProxyUrl, type ProxyConfig } from '../../pkg/agent/proxy/proxy-config.js';
import { createCA, issueCertificate, type CertKeyPair } from '../../pkg/certs/pki.js';
import { expectProxyRefused, PROXY_AUTHORIZATION, startConnectProxy } from '../support/connect-proxy.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, readExactly, startAgent, startEchoServer, startServer, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 30_000 };
const TRANSFER = 4 * 1024 * 1024;

let proxyPKI: { ca: CertKeyPair; serving: CertKeyPair } | undefined;

/** The proxy's CA (not the tunnel's) and its serving certificate for 127.0.0.1. */
function proxyCertificates(): { ca: CertKeyPair; serving: CertKeyPair } {
  if (proxyPKI !== undefined) return proxyPKI;
  const ca = createCA('test-https-proxy-ca');
  const serving = issueCertificate(ca, { commonName: 'test-https-proxy', ips: ['127.0.0.1'], usages: ['serverAuth'] });
  return (proxyPKI = { ca, serving });
}

function config(url: string, ca?: string): ProxyConfig {
  const server = parseProxyUrl(url, '--proxy-url');
  server.ca = ca;
  return { server, noProxy: new NoProxy('') };
}

for (const transport of ['grpc', 'websocket'] as const) {
  test(`an agent over ${transport} joins through an https:// proxy whose CA it is given, and 4 MiB cross byte-exact`, LIMIT, async (t) => {
    const h = harness(t);
    const { ca, serving } = proxyCertificates();
    const proxy = await startConnectProxy(h, serving);
    const server = await startServer(h);
    const echo = await startEchoServer(h);
    startAgent(h, server.agentAddress, {
      nodeName: 'edge-1',
      connection: { transport, proxy: config(`https://user:secret@127.0.0.1:${proxy.port}`, ca.cert) },
    });
    await waitFor(`agent edge-1 to register over ${transport} through the https:// proxy`, () => server.tunnel.registry.agentCount === 1);
    assert.deepEqual(proxy.asked, [{ target: server.agentAddress, auth: PROXY_AUTHORIZATION }]);

    const c = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
    assert.equal(c.status, 200, c.head);
    const sent = randomBytes(TRANSFER);
    const back = readExactly(c.socket, TRANSFER, c.rest);
    c.socket.write(sent);
    assert.ok((await back).equals(sent), 'the bytes came back as sent');
    c.socket.destroy();
  });
}

test('a wrong password at an https:// proxy is one warning with its 407', LIMIT, async (t) => {
  const h = harness(t);
  const { ca, serving } = proxyCertificates();
  const proxy = await startConnectProxy(h, serving);
  const server = await startServer(h);
  const agent = startAgent(h, server.agentAddress, {
    nodeName: 'edge-1',
    connection: { proxy: config(`https://user:wrong@127.0.0.1:${proxy.port}`, ca.cert) },
  });
  await expectProxyRefused(agent, server, `https://127.0.0.1:${proxy.port}`);
});

test('an https:// proxy certificate the agent does not trust is one warning naming the proxy; nothing goes in plain text', LIMIT, async (t) => {
  const h = harness(t);
  const { serving } = proxyCertificates();
  const proxy = await startConnectProxy(h, serving);
  const server = await startServer(h);
  // Without a CA for the proxy: Node's built-in list, which does not hold the proxy's CA.
  const agent = startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { proxy: config(`https://user:secret@127.0.0.1:${proxy.port}`) } });
  await waitFor('a retry warning', () => agent.log.find('could not connect to the tunnel server').length > 0);
  const [warning] = agent.log.find('could not connect to the tunnel server');
  assert.equal(
    warning!.fields.error,
    `proxy https://127.0.0.1:${proxy.port} (--proxy-url): its certificate is not trusted (unable to verify the first certificate): ` +
      "give the agent the proxy's CA with --proxy-ca-file",
  );
  await agent.stop();
  assert.deepEqual(proxy.asked, [], 'no CONNECT reached the proxy');
  assert.ok(!proxy.tlsClientErrors.includes('ERR_SSL_HTTP_REQUEST'), `the proxy saw no plain HTTP: ${proxy.tlsClientErrors.join(', ')}`);
  assert.equal(server.tunnel.registry.agentCount, 0);

  // A CA given that is not the proxy's: the same, saying so.
  const target = { host: '127.0.0.1', port: 1 };
  await assert.rejects(
    openServerSocket(target, config(`https://user:secret@127.0.0.1:${proxy.port}`, testPKI().ca.cert), new AbortController().signal),
    (err: unknown) => {
      assert.ok(err instanceof ProxyError);
      assert.equal(err.code, 'YT_ERR_PROXY_FAILED');
      assert.equal(
        err.message,
        `proxy https://127.0.0.1:${proxy.port} (--proxy-url): its certificate is not trusted (unable to verify the first certificate): ` +
          'its chain does not lead to a CA in --proxy-ca-file',
      );
      return true;
    },
  );
});

test('https:// given for a plain HTTP proxy fails naming the proxy, without sending CONNECT', LIMIT, async (t) => {
  const h = harness(t);
  const plain = await startConnectProxy(h);
  await assert.rejects(
    openServerSocket({ host: '127.0.0.1', port: 1 }, config(`https://127.0.0.1:${plain.port}`), new AbortController().signal),
    (err: unknown) => {
      assert.ok(err instanceof ProxyError);
      assert.equal(err.message, `proxy https://127.0.0.1:${plain.port} (--proxy-url) answered without TLS: is it an http:// proxy?`);
      return true;
    },
  );
  assert.deepEqual(plain.asked, []);
});
