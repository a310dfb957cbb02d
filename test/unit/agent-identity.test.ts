// agent-identity.ts: an agent's claimed agentid and host/ipv4/ipv6 identifiers
// must be names in its verified client certificate, in the shape Node's
// getPeerCertificate() gives them (subject.CN, subjectaltname).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseAgentIdentifiers } from '../../pkg/protocol/identifiers.js';
import { checkAgentIdentity, normalizeAddress, type PeerCertificateNames } from '../../pkg/endpoint/agent-identity.js';

/** edge-a's certificate as issue-agent-cert writes it, seen through Node. */
const EDGE_A: PeerCertificateNames = {
  subject: { CN: 'tunnel-agent-client' },
  subjectaltname: 'DNS:edge-a, IP Address:10.0.0.7, IP Address:FD00:0:0:0:0:0:0:A',
};
const EDGE_B: PeerCertificateNames = { subject: { CN: 'tunnel-agent-client' }, subjectaltname: 'DNS:edge-b, IP Address:10.0.0.8' };

const ids = parseAgentIdentifiers;

test("edge-a's certificate claiming its own name and addresses is accepted in every mode", () => {
  for (const mode of ['strict', 'agent-id', 'none'] as const) {
    assert.deepEqual(checkAgentIdentity(EDGE_A, 'edge-a', ids('host=edge-a&ipv4=10.0.0.7&ipv6=fd00::a'), mode), { ok: true }, mode);
  }
});

test("an impostor with edge-a's certificate claiming agentid edge-b is refused by strict and agent-id, naming the check", () => {
  for (const mode of ['strict', 'agent-id'] as const) {
    assert.deepEqual(checkAgentIdentity(EDGE_A, 'edge-b', ids('host=edge-b&ipv4=10.0.0.8'), mode), {
      ok: false,
      check: 'agent-id',
      claimed: 'edge-b',
      reason:
        'agent "edge-b" claims agentid=edge-b but its certificate (CN=tunnel-agent-client, DNS:edge-a, IP:10.0.0.7, IP:fd00::a) ' +
        'has no DNS SAN edge-b nor CN system:node:edge-b; issue it a certificate naming it (yurt-tunnel-server issue-agent-cert ' +
        '--node-name/--node-ip) or start the server with --agent-identity-check=none',
    });
  }
});

test('mode none trusts the metadata, as upstream does', () => {
  assert.deepEqual(checkAgentIdentity(EDGE_A, 'edge-b', ids('host=edge-b&ipv4=10.9.9.9'), 'none'), { ok: true });
  assert.deepEqual(checkAgentIdentity(undefined, 'edge-b', ids(''), 'none'), { ok: true });
});

test('a certificate naming edge-b but claiming an ipv4 it does not have: strict refuses, agent-id accepts', () => {
  const v = checkAgentIdentity(EDGE_B, 'edge-b', ids('host=edge-b&ipv4=10.0.0.7'), 'strict');
  assert.equal(v.ok, false);
  assert.equal(v.check, 'ipv4');
  assert.equal(v.claimed, '10.0.0.7');
  assert.match(
    v.reason,
    /claims ipv4=10\.0\.0\.7 but its certificate \(CN=tunnel-agent-client, DNS:edge-b, IP:10\.0\.0\.8\) has no IP SAN 10\.0\.0\.7;.*--agent-identity-check=agent-id$/,
  );
  assert.deepEqual(checkAgentIdentity(EDGE_B, 'edge-b', ids('host=edge-b&ipv4=10.0.0.7'), 'agent-id'), { ok: true });
});

test('a host identifier must be a DNS SAN (case-insensitive)', () => {
  const v = checkAgentIdentity(EDGE_B, 'edge-b', ids('host=edge-a'), 'strict');
  assert.equal(!v.ok && v.check, 'host');
  assert.deepEqual(checkAgentIdentity(EDGE_B, 'edge-b', ids('host=EDGE-B'), 'strict'), { ok: true });
});

test('IPv6 compares normalised: expanded upper-case SAN against a compressed or differently spelled claim', () => {
  for (const spelling of ['fd00::a', 'FD00::A', 'fd00:0:0:0:0:0:0:a', 'fd00:0000::000a']) {
    assert.deepEqual(checkAgentIdentity(EDGE_A, 'edge-a', ids(`ipv6=${encodeURIComponent(spelling)}`), 'strict'), { ok: true }, spelling);
  }
  const other = checkAgentIdentity(EDGE_A, 'edge-a', ids('ipv6=fd00::b'), 'strict');
  assert.equal(!other.ok && other.check, 'ipv6');
  assert.equal(normalizeAddress('FD00:0:0:0:0:0:0:A'), 'fd00::a');
  assert.equal(normalizeAddress('not-an-ip'), undefined);
});

test('an address in the wrong family, or not an address, is refused', () => {
  const v4as6 = checkAgentIdentity(EDGE_A, 'edge-a', ids('ipv6=10.0.0.7'), 'strict');
  assert.equal(!v4as6.ok && v4as6.check, 'ipv6');
  const junk = checkAgentIdentity(EDGE_A, 'edge-a', ids('ipv4=edge-a'), 'strict');
  assert.equal(!junk.ok && junk.check, 'ipv4');
});

test('the CN form system:node:<agentid> names the agent; any other CN does not', () => {
  const node: PeerCertificateNames = { subject: { CN: 'system:node:edge-c' }, subjectaltname: 'IP Address:10.0.0.9' };
  assert.deepEqual(checkAgentIdentity(node, 'edge-c', ids('ipv4=10.0.0.9'), 'strict'), { ok: true });
  assert.equal(checkAgentIdentity(node, 'edge-d', ids(''), 'agent-id').ok, false);
  const bare: PeerCertificateNames = { subject: { CN: 'edge-c' } };
  assert.equal(checkAgentIdentity(bare, 'edge-c', ids(''), 'strict').ok, false);
});

test('no certificate names nothing: refused unless mode none', () => {
  const v = checkAgentIdentity({}, 'edge-a', ids(''), 'agent-id');
  assert.equal(!v.ok && v.check, 'agent-id');
  assert.match(!v.ok ? v.reason : '', /its certificate \(no names\)/);
});

test('a SAN value Node quotes (it holds a comma) stays one name', () => {
  const quoted: PeerCertificateNames = { subjectaltname: 'DNS:"edge-a, evil", DNS:edge-x' };
  assert.equal(checkAgentIdentity(quoted, 'edge-a', ids(''), 'agent-id').ok, false);
  assert.deepEqual(checkAgentIdentity(quoted, 'edge-x', ids(''), 'agent-id'), { ok: true });
});

test("a case variant of the agentid (EDGE-A over edge-a's certificate) is refused, saying to send the node name in lower case", () => {
  for (const mode of ['strict', 'agent-id'] as const) {
    for (const variant of ['EDGE-A', 'Edge-a']) {
      assert.deepEqual(checkAgentIdentity(EDGE_A, variant, ids('host=edge-a'), mode), {
        ok: false,
        check: 'agent-id',
        claimed: variant,
        reason:
          `agent "${variant}" claims agentid=${variant} but its certificate (CN=tunnel-agent-client, DNS:edge-a, IP:10.0.0.7, IP:fd00::a) ` +
          'names edge-a: an agent ID is a node name, lower case, and compares exactly; send agentid edge-a (the node name as Kubernetes spells it)',
      });
    }
  }
  const node: PeerCertificateNames = { subject: { CN: 'system:node:edge-c' } };
  assert.equal(checkAgentIdentity(node, 'EDGE-C', ids(''), 'agent-id').ok, false);
});

test('certificate names are folded to lower case: an upper-case SAN or CN names the lower-case agent ID only', () => {
  const upper: PeerCertificateNames = { subject: { CN: 'system:node:EDGE-D' }, subjectaltname: 'DNS:EDGE-E, DNS:edge-e' };
  for (const id of ['edge-d', 'edge-e']) assert.deepEqual(checkAgentIdentity(upper, id, ids(''), 'agent-id'), { ok: true }, id);
  for (const id of ['EDGE-D', 'EDGE-E', 'Edge-e']) assert.equal(checkAgentIdentity(upper, id, ids(''), 'agent-id').ok, false, id);
});

test('with mode none there is nothing to compare: any spelling is taken as sent', () => {
  assert.deepEqual(checkAgentIdentity(EDGE_A, 'EDGE-A', ids(''), 'none'), { ok: true });
});
