// An agent is who its certificate says: a holder of edge-a's certificate
// cannot register as edge-b, neither beside the real edge-b nor instead of
// it, unless the operator chose --agent-identity-check=none.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, readExactly, startAgent, startEchoServer, startServer, waitFor } from '../support/tunnel.js';
import { scriptedAgent } from '../support/upstream.js';

const LIMIT = { timeout: 60_000 };

test("an agent with edge-a's certificate claiming edge-b is refused and logged; edge-b's traffic is not routed to it", LIMIT, async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const server = await startServer(h);
  const pki = testPKI();
  const edgeA = pki.agent('edge-a', 'ipv4=127.0.0.2&host=edge-a');
  const impostor = startAgent(h, server.agentAddress, {
    nodeName: 'edge-b',
    identifiers: 'ipv4=127.0.0.3&host=edge-b',
    tls: { ca: pki.ca.cert, ...edgeA },
  });
  await waitFor('the refusal', () => server.log.find('agent refused by the identity check').length >= 1);
  const refused = server.log.find('agent refused by the identity check')[0]!;
  assert.equal(refused.fields.agentID, 'edge-b');
  assert.equal(refused.fields.identityCheck, 'strict');
  assert.equal(refused.fields.claim, 'agent-id=edge-b');
  assert.match(
    String(refused.fields.reason),
    /^agent "edge-b" claims agentid=edge-b but its certificate \(CN=tunnel-agent-client, DNS:edge-a, IP:127\.0\.0\.2\) has no DNS SAN edge-b/,
  );
  assert.equal(server.tunnel.registry.agentCount, 0);
  await waitFor('the agent to hear why', () =>
    impostor.log.records.some((r) => /PERMISSION_DENIED: agent identity check \(strict\) failed/.test(JSON.stringify(r))),
  );

  const res = await connectVia(server.udsPath, `127.0.0.3:${echo.port}`);
  assert.equal(res.status, 503);
  const byHost = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-b' } });
  assert.equal(byHost.status, 503);

  // The real edge-b, with its own certificate, is accepted and gets the traffic.
  startAgent(h, server.agentAddress, { nodeName: 'edge-b', identifiers: 'ipv4=127.0.0.3&host=edge-b' });
  await waitFor('edge-b', () => server.tunnel.registry.agentCount === 1);
  const ok = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`, { headers: { 'X-Tunnel-Proxy-Host': 'edge-b' } });
  assert.equal(ok.status, 200, ok.head);
  ok.socket.write('hi');
  assert.equal((await readExactly(ok.socket, 2, ok.rest)).toString(), 'hi');
  ok.socket.destroy();
  await impostor.stop();
});

test('an address the certificate does not name is refused; with --agent-identity-check=none it is trusted', LIMIT, async (t) => {
  const h = harness(t);
  const pki = testPKI();
  const strict = await startServer(h);
  const plain = pki.agent('edge-a', 'host=edge-a');
  startAgent(h, strict.agentAddress, { nodeName: 'edge-a', identifiers: 'ipv4=127.0.0.5&host=edge-a', tls: { ca: pki.ca.cert, ...plain } });
  await waitFor('the refusal', () => strict.log.find('agent refused by the identity check').length >= 1);
  assert.match(
    String(strict.log.find('agent refused by the identity check')[0]!.fields.reason),
    /claims ipv4=127\.0\.0\.5 but its certificate .* has no IP SAN 127\.0\.0\.5/,
  );

  const trusting = await startServer(h, { endpoint: { identityCheck: 'none' } });
  startAgent(h, trusting.agentAddress, { nodeName: 'edge-b', identifiers: 'ipv4=127.0.0.5&host=edge-b', tls: { ca: pki.ca.cert, ...plain } });
  await waitFor('the agent accepted', () => trusting.tunnel.registry.agentCount === 1);
  assert.equal(trusting.log.find('agent refused by the identity check').length, 0);
});

test("one certificate is one agent: EDGE-1 over edge-1's certificate is refused, saying to send edge-1, beside the real edge-1", LIMIT, async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const pki = testPKI();
  const tls = { ca: pki.ca.cert, ...pki.agent('edge-1', 'host=edge-1') };
  const own = scriptedAgent(h, server.agentAddress, { metadata: [['agentid', 'edge-1']], tls });
  await own.headers;
  for (const variant of ['EDGE-1', 'Edge-1']) {
    const status = await scriptedAgent(h, server.agentAddress, { metadata: [['agentid', variant]], tls }).status;
    assert.equal(status.code, 7, variant);
    assert.match(status.details, new RegExp(`claims agentid=${variant} but its certificate \\(.*DNS:edge-1\\) names edge-1: .* send agentid edge-1 `));
  }
  assert.deepEqual(
    server.tunnel.registry.all().map((b) => b.agentID),
    ['edge-1'],
  );
});
