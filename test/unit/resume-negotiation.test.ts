// Session resume's metadata (pkg/protocol/resume.ts): what the agent presents
// and what the server answers, parsed strictly, and never echoing a secret.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { ResumeError } from '../../pkg/protocol/errors.js';
import {
  MAX_SESSION_CLAIMS,
  formatSessionClaim,
  parseResumeWindow,
  parseSessionClaims,
  parseSessionOffer,
  parseSessionToken,
} from '../../pkg/protocol/resume.js';

function token(): string {
  return `${randomBytes(16).toString('base64url')}.${randomBytes(32).toString('base64url')}`;
}

test('a session token is <22 base64url>.<43 base64url>, nothing else', () => {
  const t = token();
  const [id, secret] = t.split('.');
  assert.deepEqual(parseSessionToken(t), { id, secret });
  for (const bad of ['', '.', `${id}`, `${id}.${secret}x`, `${id}x.${secret}`, `${id}.${secret!.slice(1)}=`, `${id}+.${secret}`, `${id}.${secret}.`, ` ${t}`]) {
    assert.equal(parseSessionToken(bad), undefined, JSON.stringify(bad));
  }
});

test('claims round-trip through their metadata form', () => {
  const claims = [
    { token: token(), received: 0, attempt: 1 },
    { token: token(), received: 999_999_999_999_999, attempt: 99 },
  ];
  assert.deepEqual(parseSessionClaims(claims.map(formatSessionClaim)), claims);
  assert.deepEqual(parseSessionClaims([]), []);
});

test('a malformed, repeated or excessive claim is refused with a typed error that does not echo the secret', () => {
  const t = token();
  const secret = t.split('.')[1]!;
  const cases: Array<[string[], RegExp]> = [
    [[`${t};1`], /malformed/],
    [[`${t};1;2;3`], /malformed/],
    [[`${t};-1;2`], /malformed/],
    [[`${t};01;2`], /malformed/],
    [[`${t};1;1e3`], /malformed/],
    [[`${t};1234567890123456;1`], /malformed/],
    [[`${t.slice(0, -1)};1;1`], /malformed/],
    [[`${t};1;1`, `${t};2;2`], /claimed twice/],
    [Array.from({ length: MAX_SESSION_CLAIMS + 1 }, () => `${token()};0;1`), /too many "yurttunnel-session" values: 9 \(at most 8\)/],
  ];
  for (const [values, message] of cases) {
    const got = parseSessionClaims(values);
    assert.ok(got instanceof ResumeError, JSON.stringify(values));
    assert.equal(got.code, 'YT_ERR_RESUME_BAD_CLAIM');
    assert.match(got.message, message);
    assert.ok(!got.message.includes(secret), 'the secret stays out of the message');
  }
});

test('a resume window is one decimal value within 100 ms and 10 minutes', () => {
  assert.equal(parseResumeWindow(['10000']), 10_000);
  assert.equal(parseResumeWindow(['100']), 100);
  assert.equal(parseResumeWindow(['600000']), 600_000);
  for (const bad of [[], ['99'], ['600001'], ['0'], ['10s'], ['1', '2'], [''], ['010000']]) {
    assert.equal(parseResumeWindow(bad), undefined, JSON.stringify(bad));
  }
});

test("the server's offer: none, a new session, or a resumed one with the server's count", () => {
  const t = token();
  assert.equal(parseSessionOffer([], [], []), undefined);
  assert.deepEqual(parseSessionOffer(['5000'], [t], []), { token: t, windowMs: 5000 });
  assert.deepEqual(parseSessionOffer(['5000'], [t], ['4242']), { token: t, windowMs: 5000, resumedReceived: 4242 });
  for (const [resume, session, resumed] of [
    [['5000'], [], []],
    [[], [t], []],
    [['5000'], [t, t], []],
    [['5000'], ['not-a-token'], []],
    [['5000'], [t], ['x']],
    [['5000'], [t], ['1', '2']],
    [['50'], [t], []],
  ] as Array<[string[], string[], string[]]>) {
    const got = parseSessionOffer(resume, session, resumed);
    assert.ok(got instanceof ResumeError, JSON.stringify([resume, session.length, resumed]));
    assert.equal(got.code, 'YT_ERR_RESUME_BAD_CLAIM');
    assert.ok(!got.message.includes(t.split('.')[1]!), 'the secret stays out of the message');
  }
});
