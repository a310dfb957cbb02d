// The identity check: an agent's claims (agentid, host/ipv4/ipv6 identifiers)
// must be named by its client certificate, or one node could act as another.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { certificateNames, checkAgentIdentity } from '../../pkg/tunnel/agent-identity.js';
import { parseAgentIdentifiers } from '../../pkg/protocol/identifiers.js';

const edgeA = certificateNames('tunnel-agent-client', 'DNS:edge-a, IP Address:10.0.0.5, IP Address:FD00:0:0:0:0:0:0:5');

test('an agent whose certificate names it and its addresses is accepted', () => {
  assert.equal(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('ipv4=10.0.0.5&ipv6=fd00::5&host=edge-a')), undefined);
  assert.equal(checkAgentIdentity('strict', edgeA, 'EDGE-A', parseAgentIdentifiers('')), undefined, 'DNS names compare without case');
});

test('an impostor: edge-a\'s certificate claiming edge-b is refused, naming the certificate and what it lacks', () => {
  assert.equal(
    checkAgentIdentity('strict', edgeA, 'edge-b', parseAgentIdentifiers('host=edge-b')),
    'agent ID "edge-b" is not named by the agent\'s certificate CN=tunnel-agent-client, DNS:edge-a, IP:10.0.0.5, IP:fd00::5 ' +
      '(a DNS SAN edge-b or CN system:node:edge-b is needed)',
  );
  assert.match(checkAgentIdentity('agent-id', edgeA, 'edge-b', parseAgentIdentifiers('')) ?? '', /^agent ID "edge-b" is not named/);
});

test('an address or host the certificate does not name is refused in strict mode only', () => {
  assert.match(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('ipv4=10.0.0.6')) ?? '', /^identifier ipv4=10\.0\.0\.6 is not named/);
  assert.match(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('ipv6=fd00::6')) ?? '', /^identifier ipv6=fd00::6 is not named/);
  assert.match(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('host=kube-apiserver')) ?? '', /^identifier host=kube-apiserver is not named/);
  assert.match(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('ipv4=not-an-ip')) ?? '', /^identifier ipv4=not-an-ip/);
  assert.equal(checkAgentIdentity('agent-id', edgeA, 'edge-a', parseAgentIdentifiers('ipv4=10.0.0.6&host=other')), undefined);
});

test('IPv6 addresses compare in any spelling', () => {
  assert.equal(checkAgentIdentity('strict', edgeA, 'edge-a', parseAgentIdentifiers('ipv6=FD00:0000::0005')), undefined);
});

test('the CN form system:node:<agentID> names the agent too', () => {
  const kubeletStyle = certificateNames('system:node:edge-c', 'IP Address:10.0.0.7');
  assert.equal(checkAgentIdentity('strict', kubeletStyle, 'edge-c', parseAgentIdentifiers('ipv4=10.0.0.7&host=edge-c')), undefined);
  assert.match(checkAgentIdentity('strict', kubeletStyle, 'edge-d', parseAgentIdentifiers('')) ?? '', /^agent ID "edge-d"/);
});

test('mode none compares nothing (upstream\'s behaviour)', () => {
  assert.equal(checkAgentIdentity('none', certificateNames(undefined, undefined), 'anyone', parseAgentIdentifiers('ipv4=10.9.9.9')), undefined);
});
