// The agent through an HTTP CONNECT proxy, all on loopback and in process: a
// small proxy (test/support/connect-proxy.ts) that checks Basic credentials and
// pipes to the target, in front of a real server. The agent joins through it
// and carries data; a wrong password is one warning naming the proxy and its
// 407, never the password nor a TLS error; NO_PROXY goes around it; a proxy
// that is down or hangs fails the dial with its name and leaves nothing open.
// The real proxies (squid, tinyproxy, dante) are in agent-proxies.test.ts, an
// https:// proxy in agent-https-proxy.test.ts.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ProxyError } from '../../pkg/agent/errors.js';
import { NoProxy } from '../../pkg/agent/proxy/no-proxy.js';
import { openServerSocket } from '../../pkg/agent/proxy/open-server-socket.js';
import { parseProxyUrl, type ProxyConfig } from '../../pkg/agent/proxy/proxy-config.js';
import { expectProxyRefused, startConnectProxy } from '../support/connect-proxy.js';
import { harness } from '../support/harness.js';
import { closedPort, roundTrip, startEchoServer, startHangingListener, startServer, startAgent, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 30_000 };

function config(url: string, noProxy = ''): ProxyConfig {
  return { server: parseProxyUrl(url, '--proxy-url'), noProxy: new NoProxy(noProxy) };
}

test('an agent joins through an HTTP CONNECT proxy with Basic credentials and carries data', LIMIT, async (t) => {
  const h = harness(t);
  const proxy = await startConnectProxy(h);
  const server = await startServer(h);
  const echo = await startEchoServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { proxy: config(`http://user:secret@127.0.0.1:${proxy.port}`) } });
  await waitFor('agent edge-1 to register through the proxy', () => server.tunnel.registry.agentCount === 1);
  assert.deepEqual(proxy.asked, [{ target: server.agentAddress, auth: `Basic ${Buffer.from('user:secret').toString('base64')}` }]);
  assert.equal(await roundTrip(server.udsPath, `127.0.0.1:${echo.port}`, 'through the proxy'), 'through the proxy');
});

test('an agent on the WebSocket transport joins through the same proxy', LIMIT, async (t) => {
  const h = harness(t);
  const proxy = await startConnectProxy(h);
  const server = await startServer(h);
  const echo = await startEchoServer(h);
  startAgent(h, server.agentAddress, {
    nodeName: 'edge-1',
    connection: { transport: 'websocket', proxy: config(`http://user:secret@127.0.0.1:${proxy.port}`) },
  });
  await waitFor('agent edge-1 to register over a WebSocket through the proxy', () => server.tunnel.registry.agentCount === 1);
  assert.deepEqual(
    proxy.asked.map((a) => a.target),
    [server.agentAddress],
  );
  assert.equal(await roundTrip(server.udsPath, `127.0.0.1:${echo.port}`, 'websocket through the proxy'), 'websocket through the proxy');
});

test('a proxy that answers 407 is one warning naming the proxy and its answer, without the password', LIMIT, async (t) => {
  const h = harness(t);
  const proxy = await startConnectProxy(h);
  const server = await startServer(h);
  const agent = startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { proxy: config(`http://user:wrong@127.0.0.1:${proxy.port}`) } });
  await expectProxyRefused(agent, server, `http://127.0.0.1:${proxy.port}`);
});

test('NO_PROXY sends the agent around the proxy', LIMIT, async (t) => {
  const h = harness(t);
  const proxy = await startConnectProxy(h);
  const server = await startServer(h);
  startAgent(h, server.agentAddress, {
    nodeName: 'edge-1',
    connection: { proxy: config(`http://user:secret@127.0.0.1:${proxy.port}`, 'example.com, 127.0.0.0/8') },
  });
  await waitFor('agent edge-1 to register directly', () => server.tunnel.registry.agentCount === 1);
  assert.deepEqual(proxy.asked, []);
});

test('a proxy that is down, or hangs until the dial is abandoned, fails with its name and leaves nothing open', LIMIT, async (t) => {
  const h = harness(t);
  const down = await closedPort();
  const target = { host: '127.0.0.1', port: 1 };
  await assert.rejects(openServerSocket(target, config(`http://user:secret@127.0.0.1:${down}`), new AbortController().signal), (err: unknown) => {
    assert.ok(err instanceof ProxyError);
    assert.equal(err.code, 'YT_ERR_PROXY_FAILED');
    assert.match(err.message, new RegExp(`^proxy http://127\\.0\\.0\\.1:${down} \\(--proxy-url\\) for 127\\.0\\.0\\.1:1: connect ECONNREFUSED`));
    return true;
  });
  for (const scheme of ['http', 'https', 'socks5h']) {
    const hanging = await startHangingListener(h);
    const abandon = new AbortController();
    const reason = new Error('given up');
    const dial = openServerSocket(target, config(`${scheme}://127.0.0.1:${hanging}`), abandon.signal);
    setTimeout(() => abandon.abort(reason), 200);
    await assert.rejects(dial, (err: unknown) => err === reason);
  }
});
