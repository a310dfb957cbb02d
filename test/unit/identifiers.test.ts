// Agent identifiers as the `agentidentifiers` metadata carries them (URL-query
// syntax, keys may repeat), and the host part of a dial address that the
// destHost strategy looks up.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { emptyIdentifiers, formatAgentIdentifiers, parseAgentIdentifiers, removePortFromHost, type AgentIdentifiers } from '../../pkg/protocol/identifiers.js';

const LIMIT = { timeout: 10_000 };

test('every key may repeat and keeps its values in order', LIMIT, () => {
  const ids = parseAgentIdentifiers('ipv4=10.0.0.5&host=node1&ipv4=10.0.0.6&ipv6=fd00%3A%3A5&host=node1.edge&cidr=10.1.0.0%2F16&cidr=10.2.0.0/16');
  assert.deepEqual(ids, {
    ipv4: ['10.0.0.5', '10.0.0.6'],
    ipv6: ['fd00::5'],
    host: ['node1', 'node1.edge'],
    cidr: ['10.1.0.0/16', '10.2.0.0/16'],
    defaultRoute: false,
  });
});

test('empty values are dropped, not kept as empty identifiers', LIMIT, () => {
  assert.deepEqual(parseAgentIdentifiers('ipv4=&host=node1&ipv6=&cidr=&host='), { ...emptyIdentifiers(), host: ['node1'] });
  assert.deepEqual(parseAgentIdentifiers(''), emptyIdentifiers());
});

test('default-route is true only for the spellings Go strconv.ParseBool reads as true', LIMIT, () => {
  for (const yes of ['1', 't', 'T', 'TRUE', 'true', 'True']) {
    assert.equal(parseAgentIdentifiers(`default-route=${yes}`).defaultRoute, true, `default-route=${yes}`);
  }
  // Go's false spellings, and what ParseBool rejects (the server then treats it as false).
  for (const no of ['0', 'f', 'F', 'FALSE', 'false', 'False', '', 'yes', 'on', 'tRuE', ' true', '2']) {
    assert.equal(parseAgentIdentifiers(`default-route=${encodeURIComponent(no)}`).defaultRoute, false, `default-route=${JSON.stringify(no)}`);
  }
});

test('only the first default-route value counts', LIMIT, () => {
  assert.equal(parseAgentIdentifiers('default-route=false&default-route=true').defaultRoute, false);
  assert.equal(parseAgentIdentifiers('default-route=true&default-route=false').defaultRoute, true);
  assert.equal(parseAgentIdentifiers('default-route=maybe&default-route=true').defaultRoute, false);
});

test('unknown keys go to the callback, once per occurrence, and are otherwise ignored', LIMIT, () => {
  const unknown: string[] = [];
  const ids = parseAgentIdentifiers('zone=a&ipv4=10.0.0.5&zone=b&Host=x&region=', (key) => unknown.push(key));
  assert.deepEqual(unknown, ['zone', 'zone', 'Host', 'region']);
  assert.deepEqual(ids, { ...emptyIdentifiers(), ipv4: ['10.0.0.5'] });
  // Without a callback they are ignored all the same.
  assert.deepEqual(parseAgentIdentifiers('zone=a&host=n'), { ...emptyIdentifiers(), host: ['n'] });
});

test('formatAgentIdentifiers writes the keys in a fixed order and parses back to the same identifiers', LIMIT, () => {
  const ids: AgentIdentifiers = {
    ipv4: ['10.0.0.5', '10.0.0.6'],
    ipv6: ['fd00::5'],
    host: ['node 1', 'node&2'],
    cidr: ['10.1.0.0/16'],
    defaultRoute: true,
  };
  const text = formatAgentIdentifiers(ids);
  assert.equal(text, 'ipv4=10.0.0.5&ipv4=10.0.0.6&ipv6=fd00%3A%3A5&host=node+1&host=node%262&cidr=10.1.0.0%2F16&default-route=true');
  assert.deepEqual(parseAgentIdentifiers(text), ids);
});

test('formatAgentIdentifiers leaves default-route out when false, and formats nothing as ""', LIMIT, () => {
  assert.equal(formatAgentIdentifiers({ ...emptyIdentifiers(), host: ['node1'] }), 'host=node1');
  assert.equal(formatAgentIdentifiers(emptyIdentifiers()), '');
  assert.deepEqual(parseAgentIdentifiers(formatAgentIdentifiers(emptyIdentifiers())), emptyIdentifiers());
});

test('removePortFromHost strips the port of host:port and IPv4:port', LIMIT, () => {
  assert.equal(removePortFromHost('node1:10250'), 'node1');
  assert.equal(removePortFromHost('10.0.0.5:10250'), '10.0.0.5');
  assert.equal(removePortFromHost('node1.example.com:443'), 'node1.example.com');
});

test('removePortFromHost leaves a bare host or IPv4 as it is', LIMIT, () => {
  assert.equal(removePortFromHost('node1'), 'node1');
  assert.equal(removePortFromHost('10.0.0.5'), '10.0.0.5');
  assert.equal(removePortFromHost(''), '');
});

test('removePortFromHost strips port and brackets of a bracketed IPv6', LIMIT, () => {
  assert.equal(removePortFromHost('[::1]:8080'), '::1');
  assert.equal(removePortFromHost('[fd00::5]:10250'), 'fd00::5');
  assert.equal(removePortFromHost('[fe80::1%eth0]:10250'), 'fe80::1%eth0');
});

test('removePortFromHost keeps a bare IPv6 whole and unbrackets a bracketed one without a port', LIMIT, () => {
  assert.equal(removePortFromHost('fe80::1'), 'fe80::1');
  assert.equal(removePortFromHost('::1'), '::1');
  assert.equal(removePortFromHost('[::1]'), '::1');
  assert.equal(removePortFromHost('[fd00::5]'), 'fd00::5');
});
