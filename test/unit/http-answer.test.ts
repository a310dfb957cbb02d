// What the CONNECT frontend answers: the status chosen from a dial failure's
// typed reason (never from its text), and complete error responses whose bytes
// a client can parse (right Content-Length, a one-line body).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CONNECTION_ESTABLISHED, errorResponse, statusForDialFailure } from '../../pkg/frontend/http-answer.js';
import type { DialFailureReason } from '../../pkg/protocol/errors.js';

const LIMIT = { timeout: 10_000 };

// A Record over the union: adding a reason to errors.ts without a status here fails to compile.
const EXPECTED_STATUS: Record<DialFailureReason, number> = {
  YT_ERR_NO_AGENT: 503,
  YT_ERR_TUNNEL_CLOSED: 503,
  YT_ERR_TOO_MANY_DIALS: 503,
  YT_ERR_AGENT_LOST: 503,
  YT_ERR_DIAL_FAILED: 502,
  YT_ERR_DIAL_DENIED: 502,
  YT_ERR_AGENT_GONE: 502,
  YT_ERR_DIAL_CANCELLED: 502,
  YT_ERR_DIAL_TIMEOUT: 504,
  YT_ERR_BAD_ADDRESS: 400,
  YT_ERR_DIAL_LOOP: 508,
};

for (const [reason, status] of Object.entries(EXPECTED_STATUS) as Array<[DialFailureReason, number]>) {
  test(`a dial failing with ${reason} is answered ${status}`, LIMIT, () => {
    assert.equal(statusForDialFailure(reason), status);
  });
}

test('the success answer is the exact 200 line and a blank line, nothing else', LIMIT, () => {
  assert.equal(CONNECTION_ESTABLISHED.toString('latin1'), 'HTTP/1.1 200 Connection Established\r\n\r\n');
});

test('errorResponse: status line, headers, blank line and a one-line body, byte for byte', LIMIT, () => {
  const reason = 'dial tcp 10.0.0.5:10250: connect: connection refused';
  assert.equal(
    errorResponse(502, reason),
    'HTTP/1.1 502 Bad Gateway\r\n' +
      'Content-Type: text/plain; charset=utf-8\r\n' +
      `Content-Length: ${reason.length + 1}\r\n` +
      'Connection: close\r\n' +
      '\r\n' +
      reason +
      '\n',
  );
});

test('errorResponse uses the standard reason phrase of each status', LIMIT, () => {
  const firstLine = (status: number): string => errorResponse(status, 'x').split('\r\n')[0]!;
  assert.equal(firstLine(400), 'HTTP/1.1 400 Bad Request');
  assert.equal(firstLine(502), 'HTTP/1.1 502 Bad Gateway');
  assert.equal(firstLine(503), 'HTTP/1.1 503 Service Unavailable');
  assert.equal(firstLine(504), 'HTTP/1.1 504 Gateway Timeout');
});

test('Content-Length counts the UTF-8 bytes of the body, not its characters', LIMIT, () => {
  const reason = 'kein Agent für „edge-Knoten-ü“ 🙂';
  const response = errorResponse(503, reason);
  const [head, body] = response.split('\r\n\r\n') as [string, string];
  assert.equal(body, reason + '\n');
  const bodyBytes = Buffer.byteLength(body, 'utf8');
  assert.notEqual(bodyBytes, body.length);
  assert.match(head, new RegExp(`\r\nContent-Length: ${bodyBytes}(\r\n|$)`));
  // On the wire: the declared length is exactly what follows the blank line.
  const wire = Buffer.from(response, 'utf8');
  const bodyStart = wire.indexOf('\r\n\r\n') + 4;
  assert.equal(wire.length - bodyStart, bodyBytes);
});

test('a reason with line breaks becomes a one-line body', LIMIT, () => {
  const response = errorResponse(502, 'dial failed:\r\nconnection refused\nretry\r\rlater');
  const body = response.slice(response.indexOf('\r\n\r\n') + 4);
  assert.equal(body, 'dial failed: connection refused retry later\n');
  assert.match(response, new RegExp(`\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`));
});

test('extra headers come after the standard ones, before the blank line', LIMIT, () => {
  assert.equal(
    errorResponse(503, 'no agent', { 'Retry-After': '1' }),
    'HTTP/1.1 503 Service Unavailable\r\n' +
      'Content-Type: text/plain; charset=utf-8\r\n' +
      'Content-Length: 9\r\n' +
      'Connection: close\r\n' +
      'Retry-After: 1\r\n' +
      '\r\n' +
      'no agent\n',
  );
});

test('a CONNECT error carries its reason in the status line (kube-apiserver shows only that), cleaned and bounded', async () => {
  const { errorResponse } = await import('../../pkg/frontend/http-answer.js');
  const answer = errorResponse(503, 'node edge-1: no agent serves 10.0.0.5\r\nX-Injected: 1 ' + 'x'.repeat(1000), {}, { reasonInStatusLine: true });
  const statusLine = answer.slice(0, answer.indexOf('\r\n'));
  assert.match(statusLine, /^HTTP\/1\.1 503 Service Unavailable: node edge-1: no agent serves 10\.0\.0\.5 X-Injected: 1 x+$/);
  assert.ok(statusLine.length < 400);
  assert.equal(answer.split('\r\n').filter((l) => l.startsWith('X-Injected')).length, 0, 'no header can be injected');
  assert.match(errorResponse(503, 'plain').split('\r\n')[0]!, /^HTTP\/1\.1 503 Service Unavailable$/);
});

test("a failed dial's reason is led by its node when no agent took the dial (an agent's message names it already)", async () => {
  const { dialFailureReason } = await import('../../pkg/frontend/dial-reason.js');
  const { DialError } = await import('../../pkg/protocol/errors.js');
  const nodes = (host: string): string | undefined => (host === '10.0.0.5' ? 'edge-1' : undefined);
  assert.equal(dialFailureReason(new DialError('YT_ERR_NO_AGENT', 'no agent serves 10.0.0.5'), '10.0.0.5', nodes), 'node edge-1: no agent serves 10.0.0.5');
  assert.equal(
    dialFailureReason(new DialError('YT_ERR_DIAL_FAILED', 'agent edge-1 could not dial 10.0.0.5:1: refused'), '10.0.0.5', nodes),
    'agent edge-1 could not dial 10.0.0.5:1: refused',
  );
  assert.equal(dialFailureReason(new DialError('YT_ERR_NO_AGENT', 'no agent serves 10.9.9.9'), '10.9.9.9', nodes), 'no agent serves 10.9.9.9');
  assert.equal(dialFailureReason(new Error('x'), '10.0.0.5', undefined), 'x');
});
