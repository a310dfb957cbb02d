// The agent's --allowed-destinations: which IP:port the server may ask it to
// dial. Every malformed entry is refused at startup with a message naming it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AllowList } from '../../pkg/agent/allow-list.js';

const LIMIT = { timeout: 10_000 };

const HINT = 'use CIDR, CIDR:port, [IPv6-CIDR]:port or *';

function badEntry(entry: string, why: string): { name: string; message: string } {
  return { name: 'TypeError', message: `--allowed-destinations entry ${JSON.stringify(entry)} ${why}; ${HINT}` };
}

/** `entry` (after a good one) makes parse() throw a TypeError whose message names it. */
function assertRefusedNaming(entry: string): void {
  assert.throws(
    () => AllowList.parse(`127.0.0.1,${entry}`),
    (err: unknown) => {
      assert.ok(err instanceof TypeError, `${entry}: ${String(err)}`);
      assert.ok(err.message.startsWith(`--allowed-destinations entry ${JSON.stringify(entry)} `), `${entry}: ${err.message}`);
      assert.ok(err.message.endsWith(`; ${HINT}`), `${entry}: ${err.message}`);
      return true;
    },
    `entry ${JSON.stringify(entry)} was accepted`,
  );
}

test('a CIDR allows every address in range on any port, and nothing outside it', LIMIT, () => {
  const list = AllowList.parse('10.0.0.0/8');
  assert.equal(list.allowsEverything, false);
  assert.equal(list.description, '10.0.0.0/8');
  assert.equal(list.allows('10.0.0.0', 1), true);
  assert.equal(list.allows('10.255.255.255', 65535), true);
  assert.equal(list.allows('10.1.2.3', 10250), true);
  assert.equal(list.allows('11.0.0.0', 10250), false);
  assert.equal(list.allows('9.255.255.255', 10250), false);
});

test('a CIDR:port allows only that port', LIMIT, () => {
  const list = AllowList.parse('192.168.0.0/16:10250');
  assert.equal(list.allows('192.168.3.4', 10250), true);
  assert.equal(list.allows('192.168.3.4', 10255), false);
  assert.equal(list.allows('192.169.0.1', 10250), false);
});

test('a bare IP allows that single host, with or without a port', LIMIT, () => {
  const any = AllowList.parse('10.0.0.5');
  assert.equal(any.allows('10.0.0.5', 22), true);
  assert.equal(any.allows('10.0.0.6', 22), false);
  const one = AllowList.parse('10.0.0.5:10250');
  assert.equal(one.allows('10.0.0.5', 10250), true);
  assert.equal(one.allows('10.0.0.5', 22), false);
});

test('IPv6: unbracketed CIDR for any port, [CIDR]:port for one port, [IP] for one host', LIMIT, () => {
  const list = AllowList.parse('fd00::/64, [fd01::/64]:10250, [::1]');
  assert.equal(list.description, 'fd00::/64,[fd01::/64]:10250,[::1]');
  assert.equal(list.allows('fd00::1', 22), true);
  assert.equal(list.allows('fd00:0:0:1::1', 22), false);
  assert.equal(list.allows('fd01::abcd', 10250), true);
  assert.equal(list.allows('fd01::abcd', 10255), false);
  assert.equal(list.allows('::1', 8080), true);
  assert.equal(list.allows('::2', 8080), false);
  // An IPv4 rule does not match IPv6 addresses outside its mapped range, and vice versa.
  assert.equal(AllowList.parse('10.0.0.0/8').allows('fd00::1', 22), false);
  assert.equal(AllowList.parse('fd00::/8').allows('10.0.0.1', 22), false);
});

test('several entries: an address is allowed if any rule allows it', LIMIT, () => {
  const list = AllowList.parse('127.0.0.0/8,10.0.0.5:10250, 10.0.0.6');
  assert.equal(list.allows('127.0.0.1', 1), true);
  assert.equal(list.allows('10.0.0.5', 10250), true);
  assert.equal(list.allows('10.0.0.5', 10255), false);
  assert.equal(list.allows('10.0.0.6', 10255), true);
  assert.equal(list.allows('10.0.0.7', 10250), false);
});

test('allows() refuses anything that is not an IP literal', LIMIT, () => {
  const list = AllowList.parse('0.0.0.0/0');
  assert.equal(list.allows('10.0.0.1', 80), true);
  assert.equal(list.allows('localhost', 80), false);
  assert.equal(list.allows('', 80), false);
});

test('* allows everything, wherever it appears in the list', LIMIT, () => {
  for (const text of ['*', '10.0.0.0/8,*', ' * ']) {
    const list = AllowList.parse(text);
    assert.equal(list.allowsEverything, true, text);
    assert.equal(list.description, '*');
    assert.equal(list.allows('8.8.8.8', 53), true);
    assert.equal(list.allows('fd00::1', 1), true);
  }
  assert.equal(AllowList.everything().allows('1.2.3.4', 5), true);
});

test('an empty list is refused', LIMIT, () => {
  for (const text of ['', ' ', ',', ' , ,']) {
    assert.throws(() => AllowList.parse(text), {
      name: 'TypeError',
      message: '--allowed-destinations is empty; give CIDRs, CIDR:port entries or *',
    });
  }
});

test('exact messages: bad prefix length, port not a number, port out of range, not an IP', LIMIT, () => {
  assert.throws(() => AllowList.parse('10.0.0.0/99'), badEntry('10.0.0.0/99', 'has a prefix length outside 0-32'));
  assert.throws(() => AllowList.parse('[fd00::/129]:80'), badEntry('[fd00::/129]:80', 'has a prefix length outside 0-128'));
  assert.throws(() => AllowList.parse('10.0.0.1:http'), badEntry('10.0.0.1:http', 'has a port that is not a number'));
  assert.throws(() => AllowList.parse('10.0.0.1:0'), badEntry('10.0.0.1:0', 'has a port out of range 1-65535'));
  assert.throws(() => AllowList.parse('[fd00::1]:65536'), badEntry('[fd00::1]:65536', 'has a port out of range 1-65535'));
  assert.throws(() => AllowList.parse('node1'), badEntry('node1', 'is not an IP address or CIDR'));
});

test('the bad entry is named even when the others are good', LIMIT, () => {
  assert.throws(() => AllowList.parse('127.0.0.0/8, 10.0.0.0/33 ,::1'), badEntry('10.0.0.0/33', 'has a prefix length outside 0-32'));
});

test('every malformed entry throws a TypeError naming the entry', LIMIT, () => {
  const malformed = [
    '10.0.0.0/',
    '10.0.0.0/-1',
    '10.0.0.0/abc',
    '10.0.0.256',
    '10.0.0',
    '10.0.0.1:',
    '10.0.0.1:-1',
    '10.0.0.1:80:90',
    '[fd00::/64]:',
    '[fd00::/64]:http',
    '[fd00::1',
    'fd00::1]',
    '[]',
    '[node1]:80',
    'localhost:10250',
    'fd00::/64:10250',
  ];
  for (const entry of malformed) assertRefusedNaming(entry);
});

test('a CIDR with a second prefix length (10.0.0.0/8/9) is refused, not read as /8', LIMIT, () => {
  assertRefusedNaming('10.0.0.0/8/9');
  assertRefusedNaming('[fd00::/64/72]:10250');
});

test('defaultFor allows loopback and the node IPs on any port, skipping what is not an IP', LIMIT, () => {
  const list = AllowList.defaultFor(['10.0.0.5', 'fd00::5', '', 'node1']);
  assert.equal(list.description, '127.0.0.0/8,::1/128,10.0.0.5,fd00::5');
  assert.equal(list.allows('127.0.0.1', 10250), true);
  assert.equal(list.allows('127.9.9.9', 1), true);
  assert.equal(list.allows('::1', 10250), true);
  assert.equal(list.allows('10.0.0.5', 10250), true);
  assert.equal(list.allows('10.0.0.5', 22), true);
  assert.equal(list.allows('fd00::5', 10250), true);
  assert.equal(list.allows('10.0.0.6', 10250), false);
  assert.equal(list.allows('fd00::6', 10250), false);
});

test('defaultFor with no node IPs allows loopback only', LIMIT, () => {
  const list = AllowList.defaultFor([]);
  assert.equal(list.description, '127.0.0.0/8,::1/128');
  assert.equal(list.allows('127.0.0.1', 10250), true);
  assert.equal(list.allows('10.0.0.5', 10250), false);
});

test('a decision asked again is the same decision, also for addresses and ports that run together as text, and beyond what is remembered', LIMIT, () => {
  const list = AllowList.parse('10.0.0.1:11,10.0.0.11:1');
  for (let round = 0; round < 2; round++) {
    assert.equal(list.allows('10.0.0.1', 11), true);
    assert.equal(list.allows('10.0.0.11', 1), true);
    assert.equal(list.allows('10.0.0.1', 1), false);
    assert.equal(list.allows('10.0.0.11', 11), false);
    // More distinct questions than the list remembers.
    for (let port = 1; port <= 3000; port++) assert.equal(list.allows('10.0.0.1', port), port === 11);
  }
});
