// How the server reads an agent's DIAL_RSP error text: Go agents send Go's
// error strings, ours the same words plus a policy phrase; the reason decides
// the HTTP status and the metric label.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DENIED_BY_POLICY, classifyAgentDialError, deniedByPolicyMessage, timeoutMessage } from '../../pkg/protocol/dial-errors.js';

const LIMIT = { timeout: 10_000 };

test('Go: connection refused is a failed dial', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: connect: connection refused'), 'YT_ERR_DIAL_FAILED');
});

test('Go: i/o timeout is a timeout', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: i/o timeout'), 'YT_ERR_DIAL_TIMEOUT');
  assert.equal(classifyAgentDialError('dial tcp [fd00::5]:10250: i/o timeout'), 'YT_ERR_DIAL_TIMEOUT');
});

test('Go: no route to host and network is unreachable are failed dials', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: connect: no route to host'), 'YT_ERR_DIAL_FAILED');
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: connect: network is unreachable'), 'YT_ERR_DIAL_FAILED');
});

test('Go: no such host is a failed dial', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp: lookup node-x on 10.96.0.10:53: no such host'), 'YT_ERR_DIAL_FAILED');
});

test('Go: context deadline exceeded and connection timed out are timeouts', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: context deadline exceeded'), 'YT_ERR_DIAL_TIMEOUT');
  assert.equal(classifyAgentDialError('context deadline exceeded'), 'YT_ERR_DIAL_TIMEOUT');
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: connect: connection timed out'), 'YT_ERR_DIAL_TIMEOUT');
});

test('Go: too many open files is a failed dial', LIMIT, () => {
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: socket: too many open files'), 'YT_ERR_DIAL_FAILED');
});

test('the words are matched without regard to case', LIMIT, () => {
  assert.equal(classifyAgentDialError('DIAL TCP 10.0.0.5:10250: I/O TIMEOUT'), 'YT_ERR_DIAL_TIMEOUT');
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.9:22: Denied By Policy'), 'YT_ERR_DIAL_DENIED');
});

test('text with none of the known words is a failed dial', LIMIT, () => {
  assert.equal(classifyAgentDialError('something odd happened'), 'YT_ERR_DIAL_FAILED');
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.5:10250: connect: connection reset by peer'), 'YT_ERR_DIAL_FAILED');
});

test('deniedByPolicyMessage: Go-shaped text naming the address and the allow-list, read back as denied', LIMIT, () => {
  const text = deniedByPolicyMessage('10.0.0.9:22', '127.0.0.0/8,::1/128,10.0.0.5');
  assert.equal(text, "dial tcp 10.0.0.9:22: denied by policy (the agent's --allowed-destinations allows 127.0.0.0/8,::1/128,10.0.0.5)");
  assert.ok(text.includes(DENIED_BY_POLICY));
  assert.equal(classifyAgentDialError(text), 'YT_ERR_DIAL_DENIED');
});

test('a denial wins over timeout words elsewhere in the text', LIMIT, () => {
  assert.equal(classifyAgentDialError(deniedByPolicyMessage('10.0.0.9:22', '10.0.0.0/8:10250')), 'YT_ERR_DIAL_DENIED');
  assert.equal(classifyAgentDialError('dial tcp 10.0.0.9:22: denied by policy (i/o timeout)'), 'YT_ERR_DIAL_DENIED');
});

test('timeoutMessage: Go-shaped i/o timeout naming the address and the time, read back as a timeout', LIMIT, () => {
  const text = timeoutMessage('10.0.0.5:10250', 5000);
  assert.equal(text, 'dial tcp 10.0.0.5:10250: i/o timeout (no answer within 5000 ms)');
  assert.equal(classifyAgentDialError(text), 'YT_ERR_DIAL_TIMEOUT');
});

test('an address that merely contains "timeout" does not make a refused dial a timeout', LIMIT, () => {
  // The address is part of the text; host names are the operator's choice.
  assert.equal(classifyAgentDialError('dial tcp: lookup timeout-node.example on 10.96.0.10:53: no such host'), 'YT_ERR_DIAL_FAILED');
  assert.equal(classifyAgentDialError('dial tcp timeout.edge.svc:10250: connect: connection refused'), 'YT_ERR_DIAL_FAILED');
});
