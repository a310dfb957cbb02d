// The CONNECT frontend's request-head parser: it waits for the blank line,
// says exactly where the head ends (so pipelined bytes stay for the tunnel),
// and answers 400 for anything it cannot read unambiguously.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { headerValue, parseRequestHead, type HeadParseResult, type RequestHead } from '../../pkg/frontend/request-head.js';

const LIMIT = { timeout: 10_000 };
const MAX = 8192;

function complete(result: HeadParseResult): { head: RequestHead; length: number } {
  assert.equal(result.kind, 'complete', JSON.stringify(result));
  return result;
}

function parse(text: string, max = MAX): HeadParseResult {
  return parseRequestHead(Buffer.from(text, 'latin1'), max);
}

const CONNECT_CRLF = 'CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: 10.0.0.5:10250\r\nX-Tunnel-Proxy-Host: node1\r\n\r\n';
const CONNECT_LF = 'CONNECT 10.0.0.5:10250 HTTP/1.1\nHost: 10.0.0.5:10250\nX-Tunnel-Proxy-Host: node1\n\n';

test('a head without its blank line is incomplete', LIMIT, () => {
  for (const text of [
    '',
    'CONNECT',
    'CONNECT 10.0.0.5:10250 HTTP/1.1',
    'CONNECT 10.0.0.5:10250 HTTP/1.1\r\n',
    'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n',
    'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r',
  ]) {
    assert.deepEqual(parse(text), { kind: 'incomplete' }, JSON.stringify(text));
  }
});

test('a complete CRLF head: length points just past the blank line', LIMIT, () => {
  const { head, length } = complete(parse(CONNECT_CRLF));
  assert.equal(length, Buffer.byteLength(CONNECT_CRLF));
  assert.equal(head.method, 'CONNECT');
  assert.equal(head.target, '10.0.0.5:10250');
  assert.equal(head.version, 'HTTP/1.1');
  assert.deepEqual(
    head.headers,
    new Map([
      ['host', ['10.0.0.5:10250']],
      ['x-tunnel-proxy-host', ['node1']],
    ]),
  );
});

test('bytes pipelined after the head are left untouched past `length`', LIMIT, () => {
  // The tunnelled protocol's first bytes may contain blank lines of their own.
  const pipelined = Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\n\n\x00\xff', 'latin1');
  const buf = Buffer.concat([Buffer.from(CONNECT_CRLF), pipelined]);
  const { length } = complete(parseRequestHead(buf, MAX));
  assert.equal(length, Buffer.byteLength(CONNECT_CRLF));
  assert.deepEqual(buf.subarray(length), pipelined);
});

test('a bare-LF head ends at its own blank line even when pipelined bytes hold a CRLF blank line', LIMIT, () => {
  // A client ending its CONNECT with bare LFs and sending an HTTP/1.1 request right behind it.
  const pipelined = Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', 'latin1');
  const buf = Buffer.concat([Buffer.from(CONNECT_LF), pipelined]);
  const { head, length } = complete(parseRequestHead(buf, MAX));
  assert.equal(length, Buffer.byteLength(CONNECT_LF));
  assert.deepEqual(buf.subarray(length), pipelined);
  assert.deepEqual([...head.headers.keys()], ['host', 'x-tunnel-proxy-host']);
});

test('bare-LF line endings parse like CRLF ones', LIMIT, () => {
  const crlf = complete(parse(CONNECT_CRLF));
  const lf = complete(parse(CONNECT_LF));
  assert.equal(lf.length, Buffer.byteLength(CONNECT_LF));
  assert.deepEqual(lf.head, crlf.head);
});

test('mixed endings: a bare-LF line followed by a CRLF blank line ends the head there', LIMIT, () => {
  const text = 'CONNECT 10.0.0.5:10250 HTTP/1.1\nHost: 10.0.0.5:10250\r\nX-Tunnel-Proxy-Host: node1\n\r\n';
  const { head, length } = complete(parse(text + 'rest\r\n\r\n'));
  assert.equal(length, text.length);
  assert.deepEqual(head, complete(parse(CONNECT_CRLF)).head);
});

test('a head with no header lines is complete', LIMIT, () => {
  const { head, length } = complete(parse('CONNECT node1:10250 HTTP/1.0\r\n\r\nrest'));
  assert.equal(length, 'CONNECT node1:10250 HTTP/1.0\r\n\r\n'.length);
  assert.equal(head.version, 'HTTP/1.0');
  assert.equal(head.headers.size, 0);
});

test('header names are lower-cased, values trimmed, repeats kept in order', LIMIT, () => {
  const { head } = complete(parse('CONNECT a:1 HTTP/1.1\r\nX-Tunnel-Proxy-Host:  first \r\nhost: a:1\r\nx-tunnel-proxy-HOST:second\r\nX-Empty:\r\n\r\n'));
  assert.deepEqual(head.headers.get('x-tunnel-proxy-host'), ['first', 'second']);
  assert.deepEqual(head.headers.get('host'), ['a:1']);
  assert.deepEqual(head.headers.get('x-empty'), ['']);
  assert.deepEqual([...head.headers.keys()], ['x-tunnel-proxy-host', 'host', 'x-empty']);
  assert.equal(headerValue(head, 'x-tunnel-proxy-host'), 'first');
  assert.equal(headerValue(head, 'x-empty'), undefined);
  assert.equal(headerValue(head, 'absent'), undefined);
});

test('a malformed request line is a 400 quoting the line', LIMIT, () => {
  const cases: Array<[string, string]> = [
    ['CONNECT a:1\r\n\r\n', 'CONNECT a:1'],
    ['CONNECT  a:1 HTTP/1.1\r\n\r\n', 'CONNECT  a:1 HTTP/1.1'],
    ['CONNECT a:1 HTTP/1.1 extra\r\n\r\n', 'CONNECT a:1 HTTP/1.1 extra'],
    ['CONNECT a:1 HTTP/2.0\r\n\r\n', 'CONNECT a:1 HTTP/2.0'],
    ['CONNECT a:1 http/1.1\r\n\r\n', 'CONNECT a:1 http/1.1'],
    ['CONN(ECT a:1 HTTP/1.1\r\n\r\n', 'CONN(ECT a:1 HTTP/1.1'],
    ['\r\n\r\n', ''],
  ];
  for (const [text, line] of cases) {
    assert.deepEqual(parse(text), { kind: 'error', status: 400, message: `malformed request line ${JSON.stringify(line)}` }, JSON.stringify(text));
  }
});

test('the quoted request line is cut at 200 characters', LIMIT, () => {
  const line = 'CONNECT ' + 'a'.repeat(300) + ':1 HTTP/9.9';
  assert.deepEqual(parse(line + '\r\n\r\n'), { kind: 'error', status: 400, message: `malformed request line ${JSON.stringify(line.slice(0, 200))}` });
});

test('a malformed header line is a 400 quoting the line', LIMIT, () => {
  const cases: Array<[string, string]> = [
    ['Host a:1', 'Host a:1'],
    [': no-name', ': no-name'],
    [' Host: folded', ' Host: folded'],
    ['\tcontinued', '\tcontinued'],
    ['Bad Name: x', 'Bad Name: x'],
    ['Host : a:1', 'Host : a:1'],
  ];
  for (const [header, line] of cases) {
    assert.deepEqual(
      parse(`CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n${header}\r\n\r\n`),
      { kind: 'error', status: 400, message: `malformed header line ${JSON.stringify(line)}` },
      JSON.stringify(header),
    );
  }
});

test('an unfinished head at the size limit is a 400; one byte less is still incomplete', LIMIT, () => {
  const max = 64;
  const open = 'CONNECT a:1 HTTP/1.1\r\nX-Pad: ' + 'p'.repeat(100);
  assert.deepEqual(parse(open.slice(0, max - 1), max), { kind: 'incomplete' });
  const tooBig = { kind: 'error', status: 400, message: 'request head is larger than 64 bytes' };
  assert.deepEqual(parse(open.slice(0, max), max), tooBig);
  assert.deepEqual(parse(open, max), tooBig);
});

test('a head ending exactly at the limit is complete; one ending a byte past it is refused', LIMIT, () => {
  const head = CONNECT_CRLF;
  const n = Buffer.byteLength(head);
  assert.equal(complete(parse(head + 'pipelined', n)).length, n);
  assert.deepEqual(parse(head, n - 1), { kind: 'error', status: 400, message: `request head is larger than ${n - 1} bytes` });
  const lfN = Buffer.byteLength(CONNECT_LF);
  assert.equal(complete(parse(CONNECT_LF, lfN)).length, lfN);
  assert.deepEqual(parse(CONNECT_LF, lfN - 1), { kind: 'error', status: 400, message: `request head is larger than ${lfN - 1} bytes` });
});

test('fed one byte at a time, a head is incomplete until its last byte', LIMIT, () => {
  for (const text of [CONNECT_CRLF, CONNECT_LF, 'CONNECT [fd00::5]:10250 HTTP/1.1\r\nHost: [fd00::5]:10250\r\nA: b\n\n']) {
    const full = Buffer.from(text, 'latin1');
    for (let i = 0; i < full.length; i++) {
      assert.deepEqual(parseRequestHead(full.subarray(0, i), MAX), { kind: 'incomplete' }, `${JSON.stringify(text)} cut at ${i}`);
    }
    const whole = complete(parseRequestHead(full, MAX));
    assert.equal(whole.length, full.length);
  }
});

test('a control character in the request line (a NUL in the CONNECT host) is a 400 naming it, the line escaped', LIMIT, () => {
  const cases: Array<[string, string, string]> = [
    ['CONNECT 127.0.0.1\x00:8080 HTTP/1.1', '0x00', '"CONNECT 127.0.0.1\\x00:8080 HTTP/1.1"'],
    ['CONNECT edge\x01-1:10250 HTTP/1.1', '0x01', '"CONNECT edge\\x01-1:10250 HTTP/1.1"'],
    ['CONNECT a:1\tHTTP/1.1', '0x09', '"CONNECT a:1\\tHTTP/1.1"'],
    ['CONNECT a\x7f:1 HTTP/1.1', '0x7f', '"CONNECT a\\x7f:1 HTTP/1.1"'],
    ['CONNECT a\x1b[31m:1 HTTP/1.1', '0x1b', '"CONNECT a\\x1b[31m:1 HTTP/1.1"'],
  ];
  for (const [line, char, shown] of cases) {
    assert.deepEqual(
      parse(`${line}\r\nHost: a:1\r\n\r\n`),
      { kind: 'error', status: 400, message: `control character ${char} in the request line ${shown}` },
      JSON.stringify(line),
    );
  }
});

test('a control character in a header value (X-Tunnel-Proxy-Host) is a 400 naming the header; a tab is allowed', LIMIT, () => {
  assert.deepEqual(parse('CONNECT a:1 HTTP/1.1\r\nX-Tunnel-Proxy-Host: ed\x00ge\r\n\r\n'), {
    kind: 'error',
    status: 400,
    message: 'control character 0x00 in the value of header X-Tunnel-Proxy-Host: "ed\\x00ge"',
  });
  assert.deepEqual(parse('CONNECT a:1 HTTP/1.1\r\nHost: a\rb:1\r\n\r\n'), {
    kind: 'error',
    status: 400,
    message: 'control character 0x0d in the value of header Host: "a\\rb:1"',
  });
  const { head } = complete(parse('CONNECT a:1 HTTP/1.1\r\nX-Note: a\tb\r\n\r\n'));
  assert.equal(headerValue(head, 'x-note'), 'a\tb');
});
