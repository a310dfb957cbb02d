// Who may change the log verbosity on the meta port, and which bodies name a
// level: pure checks (pkg/meta/flags-v.ts). The real processes are in
// test/e2e/flags-v.test.ts; a caller from off the loopback cannot be made
// there, as tests dial nothing else.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isLoopbackCaller, MAX_VERBOSITY, parseVerbosity } from '../../pkg/meta/flags-v.js';

test('only a caller on the loopback may change the verbosity: any 127.0.0.0/8 address, ::1, and IPv4-mapped ones', () => {
  for (const a of ['127.0.0.1', '127.0.0.2', '127.255.255.254', '::1', '::ffff:127.0.0.1', '::FFFF:127.9.9.9', '0:0:0:0:0:0:0:1']) {
    assert.equal(isLoopbackCaller(a), true, a);
  }
  for (const a of [undefined, '', '10.0.0.1', '192.168.1.10', '128.0.0.1', '::ffff:10.1.2.3', 'fe80::1', '2001:db8::1', '::', '0.0.0.0', 'localhost']) {
    assert.equal(isLoopbackCaller(a), false, String(a));
  }
});

test('a body names a level when it is a whole number from 0 to MAX_VERBOSITY, blanks around it allowed', () => {
  assert.equal(MAX_VERBOSITY, 10);
  for (const [body, level] of [
    ['0', 0],
    ['2', 2],
    ['2\n', 2],
    [' 4 ', 4],
    ['10', 10],
    ['07', 7],
  ] as const)
    assert.equal(parseVerbosity(body), level, body);
  for (const body of ['', ' ', '-1', '11', '99', '100', '2.0', '1e1', '0x2', '+2', '2 3', 'two', '２']) assert.equal(parseVerbosity(body), undefined, body);
});
