// What reaches a log stream: a caller-supplied value can neither start a line
// nor send a terminal control sequence, in either format.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { captureLog } from '../support/log-capture.js';
import { waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 10_000 };

// ESC colour codes, CR and LF (a forged second line), a C1 CSI, DEL, a line separator and a bidi override.
const HOSTILE = '\x1b[31mRED\x1b[0m\r\nE0101 00:00:00.000000 forged\x9b2J\x7f\u2028\u202e';
/** Bytes a terminal or line reader acts on (the line ends are checked apart). */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

test('text format: control characters in the message and in every field value are escaped, one line per call', LIMIT, async () => {
  const log = captureLog('text');
  log.logger.warn(`unknown key ${HOSTILE}`, { key: HOSTILE, keys: [HOSTILE], error: new Error(HOSTILE), plain: 'edge-1' });
  await waitFor('the line', () => log.lines().length === 1);
  const text = log.text();
  assert.equal(text.split('\n').length, 2, 'one line and its end');
  assert.doesNotMatch(text, RAW_CONTROL);
  const line = log.lines()[0]!;
  assert.ok(line.includes('unknown key \\x1b[31mRED\\x1b[0m\\r\\nE0101 00:00:00.000000 forged\\x9b2J\\x7f\\u2028\\u202e'), line);
  assert.ok(line.includes(' key="\\x1b[31mRED\\x1b[0m\\r\\nE0101 00:00:00.000000 forged\\x9b2J\\x7f\\u2028\\u202e"'), line);
  assert.ok(line.includes(' keys=["\\x1b[31mRED\\x1b[0m\\r\\nE0101 00:00:00.000000 forged\\x9b2J\\x7f\\u2028\\u202e"]'), line);
  assert.ok(line.includes(' plain=edge-1'), line);
});

test('text format: a value holding a literal backslash is quoted, so it never reads as an escaped control', LIMIT, async () => {
  const log = captureLog('text');
  log.logger.warn('value', { literal: '\\x1b', real: '\x1b', inList: ['\\u001b', '\x1b'] });
  await waitFor('the line', () => log.lines().length === 1);
  assert.match(log.lines()[0]!, / literal="\\\\x1b" real="\\x1b" inList=\["\\\\u001b","\\x1b"\]$/);
});

test('text format: a field whose value is undefined is left out, as the JSON format leaves it', LIMIT, async () => {
  const log = captureLog('text');
  log.logger.warn('request to kubelet failed', { node: undefined, dialAddress: '127.0.0.1:10263', status: 508 });
  await waitFor('the line', () => log.lines().length === 1);
  assert.match(log.lines()[0]!, / request to kubelet failed dialAddress=127\.0\.0\.1:10263 status=508$/);
});

test('json format: no raw control byte, and every value parses back exactly', LIMIT, async () => {
  const log = captureLog('json');
  log.logger.warn(HOSTILE, { key: HOSTILE, keys: [HOSTILE] });
  await waitFor('the line', () => log.lines().length === 1);
  assert.equal(log.text().split('\n').length, 2);
  assert.doesNotMatch(log.text(), RAW_CONTROL);
  const parsed = JSON.parse(log.lines()[0]!) as Record<string, unknown>;
  assert.equal(parsed.message, HOSTILE);
  assert.equal(parsed.key, HOSTILE);
  assert.deepEqual(parsed.keys, [HOSTILE]);
});

test('verbosity: one level for a logger and every child, set from any of them, seen by all at once', LIMIT, async () => {
  const log = captureLog('text', 0);
  const child = log.logger.child({ component: 'server' });
  const grandchild = child.child({ agentID: 'edge-1' });
  grandchild.verbose(2, 'hidden at 0');
  assert.equal(log.logger.enabled(2), false);
  grandchild.setVerbosity(2);
  for (const l of [log.logger, child, grandchild]) {
    assert.equal(l.getVerbosity(), 2);
    assert.equal(l.enabled(2), true);
    assert.equal(l.enabled(3), false);
  }
  log.logger.verbose(2, 'root at 2');
  grandchild.verbose(2, 'grandchild at 2');
  log.logger.setVerbosity(0);
  child.verbose(2, 'hidden again');
  assert.equal(grandchild.enabled(1), false);
  await waitFor('the two lines', () => log.lines().length === 2);
  assert.deepEqual(
    log.lines().map((l) => l.replace(/^I\d{4} [\d:.]+ /, '')),
    ['root at 2', 'grandchild at 2 component=server agentID=edge-1'],
  );
});
