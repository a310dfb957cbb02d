// Flag value parsers shared by both CLIs: each turns text into a typed value
// or throws commander's InvalidArgumentError with one line saying what is expected.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { InvalidArgumentError } from 'commander';
import {
  durationParser,
  packageVersion,
  parseBool,
  parseByteSize,
  parseDuration,
  parseHostPort,
  parseHostPortOrURL,
  parseIP,
  parseIPList,
  parseList,
  parseLogFormat,
  parseNonNegativeInt,
  parsePort,
  parsePositiveInt,
  parseResumeWindow,
} from '../../cmd/common/flags.js';
import { repoRoot } from '../support/upstream.js';

const LIMIT = { timeout: 10_000 };

function invalid(message: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof InvalidArgumentError, `not an InvalidArgumentError: ${String(err)}`);
    assert.equal(err.code, 'commander.invalidArgument');
    assert.equal(err.message, message);
    return true;
  };
}

test('parseDuration reads Go-style durations into milliseconds', LIMIT, () => {
  assert.equal(parseDuration('10s'), 10_000);
  assert.equal(parseDuration('500ms'), 500);
  assert.equal(parseDuration('1m30s'), 90_000);
  assert.equal(parseDuration('1.5s'), 1500);
  assert.equal(parseDuration('1h'), 3_600_000);
  assert.equal(parseDuration('1h2m3s4ms'), 3_723_004);
  assert.equal(parseDuration('5m0s'), 300_000);
  assert.equal(parseDuration('0s'), 0);
});

test('parseDuration reads a bare number as seconds', LIMIT, () => {
  assert.equal(parseDuration('2'), 2000);
  assert.equal(parseDuration('0.25'), 250);
  assert.equal(parseDuration('0'), 0);
});

test('parseDuration refuses what is not a duration', LIMIT, () => {
  for (const text of ['soon', '', '10x', '-1s', 's', 'ms', '1m30', '10 s', ' 10s', '10s ', '1.s', '1..5s', '1s500', '1e3', '10sec']) {
    assert.throws(() => parseDuration(text), invalid(`not a duration: use e.g. 10s, 500ms, 1m (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parseResumeWindow takes 0 (off) or 100ms to 10m, and refuses what resume metadata could not carry', LIMIT, () => {
  assert.equal(parseResumeWindow('0'), 0);
  assert.equal(parseResumeWindow('100ms'), 100);
  assert.equal(parseResumeWindow('10s'), 10_000);
  assert.equal(parseResumeWindow('10m'), 600_000);
  for (const text of ['50ms', '10m1ms', '1h']) {
    assert.throws(() => parseResumeWindow(text), invalid(`out of range: use 100ms to 10m, or 0 (off) (got ${JSON.stringify(text)})`), text);
  }
  assert.throws(() => parseResumeWindow('soon'), invalid('not a duration: use e.g. 10s, 500ms, 1m (got "soon")'));
});

test('durationParser takes its range, 0 only where 0 means something, and says the range when it refuses', LIMIT, () => {
  const timeout = durationParser({ min: '1ms', max: '10m' });
  assert.equal(timeout('1ms'), 1);
  assert.equal(timeout('10m'), 600_000);
  assert.equal(timeout('5'), 5000);
  for (const text of ['0', '0s', '0.5ms', '10m1ms', '1000h']) {
    assert.throws(() => timeout(text), invalid(`out of range: use 1ms to 10m (got ${JSON.stringify(text)})`), text);
  }
  assert.throws(() => timeout('-1s'), invalid('cannot be negative: use 1ms to 10m (got "-1s")'));
  assert.throws(() => timeout('soon'), invalid('not a duration: use e.g. 10s, 500ms, 1m (got "soon")'));
  const probe = durationParser({ min: '1s', max: '24h', zero: 'never' });
  assert.equal(probe('0'), 0);
  assert.equal(probe('0s'), 0);
  assert.throws(() => probe('500ms'), invalid('out of range: use 1s to 24h, or 0 (never) (got "500ms")'));
  assert.throws(() => probe('-0s'), invalid('cannot be negative: use 1s to 24h, or 0 (never) (got "-0s")'));
});

test('parseHostPort takes host:port and [IPv6]:port with a port 1-65535, nothing else', LIMIT, () => {
  for (const text of ['10.0.0.1:10262', '[fd00::1]:10262', 'tunnel.example.com:443']) assert.equal(parseHostPort(text), text);
  for (const text of ['127.0.0.1', '127.0.0.1:0', '127.0.0.1:65536', '::1:80', 'host:port', ':10262', '']) {
    assert.throws(
      () => parseHostPort(text),
      (err: Error) => err.message.startsWith('not host:port with a port 1-65535, e.g. '),
      JSON.stringify(text),
    );
  }
});

test('parseHostPortOrURL also takes an http(s) URL, and a bare IPv6 address with its port as the manifests build it', LIMIT, () => {
  for (const text of ['10.0.0.1:6443', 'https://10.0.0.1:6443', 'https://kubernetes.default.svc', 'fd00::1:443', '[fd00::1]:443']) {
    assert.equal(parseHostPortOrURL(text), text);
  }
  for (const text of ['10.0.0.1', 'kubernetes', 'https://', 'ftp://10.0.0.1:21']) {
    assert.throws(
      () => parseHostPortOrURL(text),
      invalid(`not host:port or an https:// URL, e.g. 10.0.0.1:6443 or https://10.0.0.1:6443 (got ${JSON.stringify(text)})`),
      text,
    );
  }
});

test('parsePort accepts 0-65535', LIMIT, () => {
  assert.equal(parsePort('0'), 0);
  assert.equal(parsePort('10262'), 10262);
  assert.equal(parsePort('65535'), 65535);
});

test('parsePort refuses out-of-range and non-numeric ports', LIMIT, () => {
  for (const text of ['65536', '70000', '-1', '', 'http', '80a', '1.5', ' 80', '0x50']) {
    assert.throws(() => parsePort(text), invalid(`not a port number 0-65535 (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parsePositiveInt accepts 1 and up, nothing else', LIMIT, () => {
  assert.equal(parsePositiveInt('1'), 1);
  assert.equal(parsePositiveInt('3'), 3);
  for (const text of ['0', '-1', '', 'two', '1.5', '2x']) {
    assert.throws(() => parsePositiveInt(text), invalid(`not a positive integer (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parseNonNegativeInt accepts 0 and up', LIMIT, () => {
  assert.equal(parseNonNegativeInt('0'), 0);
  assert.equal(parseNonNegativeInt('5'), 5);
  for (const text of ['-1', '', 'v', '2.5']) {
    assert.throws(() => parseNonNegativeInt(text), invalid(`not a non-negative integer (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parseByteSize reads bytes, plain or with Ki, Mi, Gi; nothing below 1', LIMIT, () => {
  assert.equal(parseByteSize('1'), 1);
  assert.equal(parseByteSize('268435456'), 256 * 1024 * 1024);
  assert.equal(parseByteSize('512Ki'), 512 * 1024);
  assert.equal(parseByteSize('256Mi'), 256 * 1024 * 1024);
  assert.equal(parseByteSize('2Gi'), 2 * 1024 ** 3);
  for (const text of ['0', '0Mi', '', '-1', '1.5Mi', '256M', '256MiB', 'Mi', '99999999999999999']) {
    assert.throws(
      () => parseByteSize(text),
      invalid(`not a positive size in bytes: use e.g. 268435456, 512Ki, 256Mi, 1Gi (got ${JSON.stringify(text)})`),
      JSON.stringify(text),
    );
  }
});

test('parseIP accepts IPv4 and IPv6 literals, returned as given', LIMIT, () => {
  assert.equal(parseIP('10.0.0.5'), '10.0.0.5');
  assert.equal(parseIP('::1'), '::1');
  assert.equal(parseIP('fd00::5'), 'fd00::5');
});

test('parseIP refuses names and malformed addresses', LIMIT, () => {
  for (const text of ['node1', 'localhost', '', '10.0.0.256', '10.0.0', '[::1]', '10.0.0.5:80']) {
    assert.throws(() => parseIP(text), invalid(`not an IP address (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parseIPList reads a comma list, trimming and skipping blanks', LIMIT, () => {
  assert.deepEqual(parseIPList('10.0.0.1, ::1 ,,fd00::5,'), ['10.0.0.1', '::1', 'fd00::5']);
  assert.deepEqual(parseIPList(''), []);
});

test('parseIPList names the entry that is not an IP', LIMIT, () => {
  assert.throws(() => parseIPList('10.0.0.1, node1'), invalid('"node1" is not an IP address'));
});

test('parseList splits on commas, trimming and skipping blanks', LIMIT, () => {
  assert.deepEqual(parseList(' a.example ,b.example,, '), ['a.example', 'b.example']);
  assert.deepEqual(parseList(''), []);
});

test('parseBool passes booleans through (a bare flag) and reads Go-style words in any case', LIMIT, () => {
  assert.equal(parseBool(true), true);
  assert.equal(parseBool(false), false);
  for (const text of ['true', 'TRUE', 'True', 't', 'T', '1']) assert.equal(parseBool(text), true, text);
  for (const text of ['false', 'FALSE', 'False', 'f', 'F', '0']) assert.equal(parseBool(text), false, text);
});

test('parseBool refuses other words', LIMIT, () => {
  for (const text of ['yes', 'no', 'on', '', '2', 'truee']) {
    assert.throws(() => parseBool(text), invalid(`not a boolean: use true or false (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('parseLogFormat accepts exactly text and json', LIMIT, () => {
  assert.equal(parseLogFormat('text'), 'text');
  assert.equal(parseLogFormat('json'), 'json');
  for (const text of ['JSON', 'Text', 'logfmt', '']) {
    assert.throws(() => parseLogFormat(text), invalid(`use text or json (got ${JSON.stringify(text)})`), JSON.stringify(text));
  }
});

test('packageVersion is the version in package.json', LIMIT, () => {
  const pkg = JSON.parse(readFileSync(join(repoRoot(), 'package.json'), 'utf8')) as { version: string };
  assert.equal(packageVersion(), pkg.version);
});
