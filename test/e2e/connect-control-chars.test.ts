// Control characters from a caller (issue 35.4): a NUL or other control
// character in a CONNECT host or X-Tunnel-Proxy-Host is a 400 naming it, not a
// dial and a 503; the log lines that quote it (the real text logger) hold it
// escaped; and the proxier keeps serving. Real Unix socket, real tunnel.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { HttpConnectServer } from '../../pkg/frontend/http-connect.js';
import { Tunnel } from '../../pkg/tunnel/tunnel.js';
import { harness } from '../support/harness.js';
import { captureLog } from '../support/log-capture.js';
import { startMaster } from '../support/master.js';
import { connectVia, readAll, startServer, tempDir } from '../support/tunnel.js';

const LIMIT = { timeout: 30_000 };

// eslint-disable-next-line no-control-regex -- finding raw control characters is the point
const RAW_CONTROL = /[\x00-\x09\x0b-\x1f\x7f]/;

test('a control character in the CONNECT host or X-Tunnel-Proxy-Host is a 400 naming it; the log holds it escaped', LIMIT, async (t) => {
  const h = harness(t);
  const log = captureLog('text');
  const tunnel = new Tunnel({ logger: log.logger });
  const path = join(await tempDir(h), 'proxier.sock');
  const proxier = new HttpConnectServer(tunnel, { path, logger: log.logger });
  h.defer(async () => {
    await proxier.close();
    await tunnel.close();
  });
  await proxier.start();

  const nul = await connectVia(path, '127.0.0.1\x00:8080');
  assert.equal(nul.status, 400);
  assert.equal(nul.rest.toString(), 'control character 0x00 in the request line "CONNECT 127.0.0.1\\x00:8080 HTTP/1.1"\n');

  const header = await connectVia(path, '127.0.0.1:8080', { headers: { 'X-Tunnel-Proxy-Host': 'edge\x01-1' } });
  assert.equal(header.status, 400);
  assert.equal(header.rest.toString(), 'control character 0x01 in the value of header X-Tunnel-Proxy-Host: "edge\\x01-1"\n');
  assert.equal(await tunnel.metrics.failures('YT_ERR_NO_AGENT'), 0, 'neither reached a dial');

  // Still serving: a good request goes on to the dial (no agent here: 503).
  const good = await connectVia(path, '127.0.0.1:8080');
  assert.equal(good.status, 503);

  await proxier.close();
  const lines = log.lines();
  const bad = lines.filter((l) => l.includes('bad CONNECT request'));
  assert.equal(bad.length, 2, lines.join('\n'));
  assert.match(bad[0]!, /127\.0\.0\.1\\\\x00:8080/);
  for (const line of lines) assert.doesNotMatch(line, RAW_CONTROL, JSON.stringify(line));
});

test('a dial address with a control character is refused before any agent is asked (the egress gRPC path)', LIMIT, async (t) => {
  const h = harness(t);
  const tunnel = new Tunnel();
  h.defer(() => tunnel.close());
  await assert.rejects(tunnel.dial('127.0.0.1\x00:8080'), {
    code: 'YT_ERR_BAD_ADDRESS',
    message: 'dial address "127.0.0.1\\u0000:8080" has a control character (0x00); a host name or address has none',
  });
});

test('a control character in the Host or a header on a master port is a 400 naming the header and the character', LIMIT, async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const { insecurePort } = await startMaster(h, server);
  const ask = async (head: string): Promise<string> => {
    const socket = connect(insecurePort, '127.0.0.1');
    await once(socket, 'connect');
    socket.write(Buffer.from(head, 'latin1'));
    return (await readAll(socket)).toString('latin1');
  };
  const host = await ask('GET /stats/summary HTTP/1.1\r\nHost: 127.0.0.1\x00:10250\r\n\r\n');
  assert.match(host, /^HTTP\/1\.1 400 Bad Request\r\n/);
  assert.ok(host.endsWith('\r\n\r\nmalformed request: control character 0x00 in the value of header Host: "127.0.0.1\\x00:10250"\n'), host);
  const proxyHost = await ask('GET / HTTP/1.1\r\nHost: edge-1:10250\r\nX-Tunnel-Proxy-Host: ed\x01ge\r\n\r\n');
  assert.ok(proxyHost.endsWith('malformed request: control character 0x01 in the value of header X-Tunnel-Proxy-Host: "ed\\x01ge"\n'), proxyHost);
  const target = await ask('GET /\x02 HTTP/1.1\r\nHost: edge-1:10250\r\n\r\n');
  assert.ok(target.endsWith('malformed request: control character 0x02 in the request line "GET /\\x02 HTTP/1.1"\n'), target);
});
