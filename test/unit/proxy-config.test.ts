// Which proxy the agent uses (pkg/agent/proxy/proxy-config.ts) and which
// servers NO_PROXY exempts (no-proxy.ts), read as curl and Go read them.

import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { NoProxy } from '../../pkg/agent/proxy/no-proxy.js';
import { parseProxyUrl, proxyConfigFrom, proxyFor, redact } from '../../pkg/agent/proxy/proxy-config.js';
import { ConfigError } from '../../pkg/protocol/errors.js';
import { testPKI } from '../support/pki.js';

test('NO_PROXY: *, IPs, CIDRs, domains with and without a leading dot, ports', () => {
  const cases: [string, string, number, boolean][] = [
    ['*', 'anything.example', 1, true],
    ['10.0.0.0/8', '10.2.3.4', 443, true],
    ['10.0.0.0/8', '11.2.3.4', 443, false],
    ['fd00::/16', 'fd00::5', 443, true],
    ['10.1.1.1', '10.1.1.1', 10262, true],
    ['10.1.1.1:80', '10.1.1.1', 10262, false],
    ['10.1.1.1:10262', '10.1.1.1', 10262, true],
    ['::1', '::1', 1, true],
    ['[::1]:5', '::1', 5, true],
    ['example.com', 'example.com', 1, true],
    ['example.com', 'tunnel.example.com', 1, true],
    ['example.com', 'badexample.com', 1, false],
    ['.example.com', 'example.com', 1, false],
    ['.example.com', 'a.example.com', 1, true],
    ['*.example.com', 'a.example.com', 1, true],
    ['Example.COM:10262', 'tunnel.example.com', 10262, true],
    ['example.com:10262', 'tunnel.example.com', 443, false],
    [' a.test , example.com ', 'example.com', 1, true],
    ['', 'example.com', 1, false],
    ['10.0.0.0/99, not an entry', '10.0.0.1', 1, false],
    ['example.com', '10.0.0.1', 1, false],
  ];
  for (const [list, host, port, expected] of cases) {
    assert.equal(new NoProxy(list).bypasses(host, port), expected, `NO_PROXY=${JSON.stringify(list)} for ${host}:${port}`);
  }
});

test('proxy URLs: schemes, default ports, credentials decoded and kept out of what is shown', () => {
  assert.deepEqual(parseProxyUrl('http://us%40er:p%3Ass@proxy.example:3128', 'HTTPS_PROXY'), {
    protocol: 'http',
    host: 'proxy.example',
    port: 3128,
    credentials: { username: 'us@er', password: 'p:ss' },
    display: 'http://proxy.example:3128',
    namedBy: 'HTTPS_PROXY',
  });
  assert.equal(parseProxyUrl('proxy.example', 'x').display, 'http://proxy.example:80');
  assert.equal(parseProxyUrl('https://proxy.example', 'x').port, 443);
  assert.equal(parseProxyUrl('socks5h://[fd00::1]', 'x').host, 'fd00::1');
  assert.equal(parseProxyUrl('socks5://10.0.0.1', 'x').port, 1080);
  assert.throws(() => parseProxyUrl('ftp://u:secret@proxy', 'ALL_PROXY'), {
    name: 'TypeError',
    message: 'ALL_PROXY: proxy scheme "ftp:" is not supported; use http://, https://, socks5:// or socks5h://',
  });
  assert.throws(
    () => parseProxyUrl('http://u:secret@proxy/path', '--proxy-url'),
    (err: Error) => {
      assert.match(err.message, /^--proxy-url: "http:\/\/\*\*\*@proxy\/path" has a path/);
      return true;
    },
  );
  assert.equal(redact('http://u:secret@proxy:1'), 'http://***@proxy:1');
  assert.equal(redact('proxy:1'), 'proxy:1');
});

test('--proxy-url wins over the environment; lower case first; NO_PROXY applies; the credentials file wins over the URL', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'yt-proxy-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const env = { HTTPS_PROXY: 'http://upper:1', https_proxy: 'http://lower:2', ALL_PROXY: 'socks5://all:3', NO_PROXY: '.internal' };
  assert.equal((await proxyConfigFrom({ env }))?.server.display, 'http://lower:2');
  assert.equal((await proxyConfigFrom({ env: { ALL_PROXY: 'socks5://all:3' } }))?.server.namedBy, 'ALL_PROXY');
  assert.equal(await proxyConfigFrom({ env: { https_proxy: ' ' } }), undefined);
  const flagged = await proxyConfigFrom({ proxyUrl: 'socks5h://u:p@flag:4', env });
  assert.equal(flagged?.server.namedBy, '--proxy-url');
  assert.equal(proxyFor(flagged, 'tunnel.internal', 10262), undefined);
  assert.equal(proxyFor(flagged, 'tunnel.example', 10262)?.host, 'flag');

  const file = join(dir, 'credentials');
  await writeFile(file, 'squid-user:pa:ss\n');
  assert.deepEqual((await proxyConfigFrom({ proxyUrl: 'http://u:p@flag:4', credentialsFile: file }))?.server.credentials, {
    username: 'squid-user',
    password: 'pa:ss',
  });
  await assert.rejects(proxyConfigFrom({ proxyUrl: 'http://flag:4', credentialsFile: join(dir, 'missing') }), (err: unknown) => {
    assert.ok(err instanceof ConfigError);
    assert.equal(err.code, 'YT_ERR_FILE_UNREADABLE');
    assert.match(err.message, /^--proxy-credentials-file: cannot read .*missing/);
    return true;
  });
  await writeFile(file, 'no colon\n');
  await assert.rejects(proxyConfigFrom({ proxyUrl: 'http://flag:4', credentialsFile: file }), { code: 'YT_ERR_FILE_INVALID' });
  await assert.rejects(proxyConfigFrom({ credentialsFile: file }), { name: 'TypeError', message: /no proxy is set/ });
});

test('--proxy-ca-file: read for an https:// proxy; refused without one, for another scheme, unreadable or not a certificate', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'yt-proxy-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'proxy-ca.crt');
  await writeFile(file, testPKI().ca.cert);
  assert.equal((await proxyConfigFrom({ env: { HTTPS_PROXY: 'https://proxy:3129' }, caFile: file }))?.server.ca, testPKI().ca.cert);
  assert.equal((await proxyConfigFrom({ proxyUrl: 'https://proxy:3129' }))?.server.ca, undefined);
  await assert.rejects(proxyConfigFrom({ caFile: file }), {
    name: 'TypeError',
    message: '--proxy-ca-file is given but no proxy is set (--proxy-url, HTTPS_PROXY or ALL_PROXY)',
  });
  await assert.rejects(proxyConfigFrom({ env: { HTTPS_PROXY: 'http://proxy:3128' }, caFile: file }), {
    name: 'TypeError',
    message: '--proxy-ca-file is for an https:// proxy; HTTPS_PROXY names http://proxy:3128',
  });
  await assert.rejects(proxyConfigFrom({ proxyUrl: 'https://proxy', caFile: join(dir, 'missing') }), (err: unknown) => {
    assert.ok(err instanceof ConfigError);
    assert.equal(err.code, 'YT_ERR_FILE_UNREADABLE');
    assert.match(err.message, /^--proxy-ca-file: cannot read .*missing: ENOENT/);
    return true;
  });
  await writeFile(file, 'not a certificate\n');
  await assert.rejects(proxyConfigFrom({ proxyUrl: 'https://proxy', caFile: file }), {
    code: 'YT_ERR_FILE_INVALID',
    message: /^--proxy-ca-file: .*proxy-ca\.crt does not hold a PEM certificate: it holds no PEM block/,
  });
});
