// The server's Unix sockets (the proxier's and the egress selector's) belong
// to whoever answers on them (issue 35, item 2): a second server started on a
// live socket exits 1 naming the flag and the path while the first serves on;
// a stale socket file is replaced; a socket file removed or replaced fails
// /readyz, and stopping never removes a socket file that is no longer ours.

import assert from 'node:assert/strict';
import { lstat, rename, unlink, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { once } from 'node:events';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { TunnelServer } from '../../pkg/server/app.js';
import { startTestAgent } from '../support/cluster.js';
import { harness, type Harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { metaGet } from '../support/meta-get.js';
import { runProcess, SERVER_BIN, startProcess } from '../support/processes.js';
import { testServerOptions } from '../support/server-options.js';
import { connectVia, readExactly, startEchoServer, tempDir, waitFor } from '../support/tunnel.js';
import { localServerFlags } from '../../hack/local-tunnel.js';

/** A server with the proxier and an HTTP CONNECT egress socket in `dir`, its meta port, and agent edge-1. */
async function startServing(h: Harness, dir: string) {
  const log = new MemoryLogger(2);
  const egressPath = join(dir, 'egress.sock');
  const server = await TunnelServer.start(
    testServerOptions(dir, { metaPort: 0, startupRehearsal: false, egressSelector: { uds: egressPath, mode: 'http-connect' }, logger: log }),
  );
  h.defer(() => server.stop());
  const agentDir = join(dir, 'agent');
  await writeAgentCertificate({ certDir: join(dir, 'server-pki'), nodeName: 'edge-1', outDir: agentDir, nodeIPs: ['127.0.0.1'] });
  await startTestAgent(h, server, { nodeName: 'edge-1', certDir: agentDir });
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  return { server, log, proxierPath: join(dir, 'proxier.sock'), egressPath, metaPort: server.meta!.address.port };
}

/** One echoed message through a CONNECT socket. */
async function echoesThrough(udsPath: string, echoPort: number, text: string): Promise<void> {
  const res = await connectVia(udsPath, `127.0.0.1:${echoPort}`);
  try {
    assert.equal(res.status, 200, res.head);
    res.socket.write(text);
    assert.equal((await readExactly(res.socket, text.length, res.rest)).toString(), text);
  } finally {
    res.socket.destroy();
  }
}

/** A socket file at `path` that nothing answers on: its process was killed. */
async function leaveStaleSocket(h: Harness, path: string): Promise<void> {
  const script = `require('node:net').createServer().listen(${JSON.stringify(path)}, () => process.kill(process.pid, 'SIGKILL'))`;
  const p = startProcess(h, '-e', [script]);
  assert.equal(await p.exited, 'SIGKILL');
  assert.ok((await lstat(path)).isSocket(), 'the killed process left its socket file');
}

test('a second server on a live socket exits 1 naming the flag and the path; the first serves on through it', { timeout: 60_000 }, async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const dir = await tempDir(h);
  const { proxierPath, egressPath, metaPort } = await startServing(h, dir);
  const before = { proxier: (await lstat(proxierPath)).ino, egress: (await lstat(egressPath)).ino };

  const second = async (extra: string[], uds: string): Promise<{ code: number | string; output: string }> => {
    const p = startProcess(h, SERVER_BIN, [...localServerFlags({ certDir: join(dir, 'second-pki'), udsPath: uds }), '--startup-rehearsal', 'false', ...extra]);
    const started = p.waitForLine(/yurt-tunnel-server started/, 20_000).then(
      () => 'started' as const,
      () => 'exited' as const,
    );
    if ((await Promise.race([p.exited.then(() => 'exited' as const), started])) === 'started') {
      p.kill('SIGKILL');
      assert.fail(`the second server started on the first one's socket:\n${p.lines.join('\n')}`);
    }
    return { code: await p.exited, output: p.lines.join('\n') };
  };
  const onProxier = await second([], proxierPath);
  assert.equal(onProxier.code, 1, onProxier.output);
  assert.ok(
    onProxier.output.includes(
      `yurt-tunnel-server: --interceptor-proxier-uds ${proxierPath}: address already in use: a process answers on it (another yurt-tunnel-server?); ` +
        'stop that process, or choose another path',
    ),
    onProxier.output,
  );
  const onEgress = await second(['--egress-selector-enable', '--egress-selector-uds', egressPath], join(dir, 'other-proxier.sock'));
  assert.equal(onEgress.code, 1, onEgress.output);
  assert.ok(
    onEgress.output.includes(`yurt-tunnel-server: --egress-selector-uds ${egressPath}: address already in use: a process answers on it`),
    onEgress.output,
  );

  // The refused servers took nothing over and removed nothing: the same files, answered by the first server.
  assert.deepEqual({ proxier: (await lstat(proxierPath)).ino, egress: (await lstat(egressPath)).ino }, before);
  await assert.rejects(lstat(join(dir, 'other-proxier.sock')), { code: 'ENOENT' }, 'the refused server removed the socket it had made');
  await echoesThrough(proxierPath, echo.port, 'still the first server');
  await echoesThrough(egressPath, echo.port, 'and its egress socket');
  assert.deepEqual(await metaGet(metaPort, '/readyz'), { status: 200, body: 'ok' });
});

test('a stale socket file (its process was killed) is replaced, and the server serves on it', { timeout: 30_000 }, async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const dir = await tempDir(h);
  await leaveStaleSocket(h, join(dir, 'proxier.sock'));
  await leaveStaleSocket(h, join(dir, 'egress.sock'));
  const { log, proxierPath, egressPath } = await startServing(h, dir);
  assert.equal(log.find('replaced a stale socket file: nothing answered on it').length, 2);
  await echoesThrough(proxierPath, echo.port, 'through the replaced proxier socket');
  await echoesThrough(egressPath, echo.port, 'through the replaced egress socket');
  // A path taken by a file that is no socket is still never replaced.
  const file = join(dir, 'not-a-socket');
  await writeFile(file, 'keep me');
  const r = await runProcess(h, SERVER_BIN, [...localServerFlags({ certDir: join(dir, 'second-pki'), udsPath: file }), '--startup-rehearsal', 'false']);
  assert.equal(r.code, 1, r.output);
  assert.ok(r.output.includes(`--interceptor-proxier-uds ${file} exists and is not a socket; refusing to replace it`), r.output);
});

test('readyz fails once a socket file is removed or replaced; stopping leaves a socket that is not ours', async (t) => {
  const h = harness(t);
  const dir = await tempDir(h);
  const { server, proxierPath, egressPath, metaPort } = await startServing(h, dir);
  assert.deepEqual(await metaGet(metaPort, '/readyz'), { status: 200, body: 'ok' });

  await unlink(proxierPath);
  const removed = await metaGet(metaPort, '/readyz?verbose');
  assert.equal(removed.status, 503);
  assert.ok(
    removed.body.includes(`[-]listeners failed: socket ${proxierPath} was removed: nothing can connect to it; restart the server to create it again\n`),
    removed.body,
  );

  // Another process's live sockets now sit at both paths (our egress socket moved aside).
  const others = async (path: string): Promise<number> => {
    const other = createServer();
    other.listen(path);
    await once(other, 'listening');
    h.defer(() => new Promise((r) => other.close(r)));
    return (await lstat(path)).ino;
  };
  const othersProxier = await others(proxierPath);
  await rename(egressPath, join(dir, 'ours-moved.sock'));
  const othersEgress = await others(egressPath);
  const replaced = await metaGet(metaPort, '/readyz?verbose');
  assert.equal(replaced.status, 503);
  assert.ok(
    replaced.body.includes(`[-]listeners failed: socket ${proxierPath} was replaced by another file: callers reach whatever made it, not this server\n`),
    replaced.body,
  );

  await server.stop();
  assert.equal((await lstat(proxierPath)).ino, othersProxier, "stopping left the other process's socket at the proxier's path");
  assert.equal((await lstat(egressPath)).ino, othersEgress, 'and at the egress path');
});
