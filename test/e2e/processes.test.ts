// The real yurt-tunnel-server and yurt-tunnel-agent processes: certificates
// from the server's local CA, an agent killed mid-stream, a server restart, a
// drained agent, a graceful shutdown.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { harness, type Harness } from '../support/harness.js';
import { AGENT_BIN, SERVER_BIN, startProcess, type Proc } from '../support/processes.js';
import { PatternVerifier, writePattern } from '../support/standin-kubelet/index.js';
import { connectVia, readExactly, startEchoServer, startTCPServer, tempDir, waitFor } from '../support/tunnel.js';
import { issueAgentCertificate, localAgentFlags, localServerFlags } from '../../hack/local-tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

interface Setup {
  dir: string;
  udsPath: string;
  port: number;
  startServer(): Promise<Proc>;
  startAgent(extra?: string[]): Promise<Proc>;
}

async function setup(h: Harness): Promise<Setup> {
  const dir = await tempDir(h);
  const udsPath = join(dir, 'proxier.sock');
  const port = await freeLowPort();
  const startServer = async (): Promise<Proc> => {
    const p = startProcess(h, SERVER_BIN, [...localServerFlags({ certDir: join(dir, 'pki'), agentPort: port, udsPath }), '--v', '2']);
    await p.waitForLine(/yurt-tunnel-server started/);
    return p;
  };
  const startAgent = async (extra: string[] = []): Promise<Proc> => {
    const p = startProcess(h, AGENT_BIN, [
      ...localAgentFlags({ nodeName: 'edge-1', serverPort: port, agentDir: join(dir, 'agent') }),
      '--sync-interval',
      '200ms',
      '--sync-interval-cap',
      '1s',
      '--v',
      '2',
      ...extra,
    ]);
    await p.waitForLine(/connected to tunnel server/);
    return p;
  };
  return { dir, udsPath, port, startServer, startAgent };
}

/** The agent's certificate, where startAgent() reads it. */
const issueAgentCert = (s: Setup): Promise<void> => issueAgentCertificate(join(s.dir, 'pki'), 'edge-1', join(s.dir, 'agent'));

test('an agent killed mid-stream closes the client within a second', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const s = await setup(h);
  const server = await s.startServer();
  // Local mode: its own CA, and the cluster-only parts each skipped with one line.
  assert.equal(server.lines.filter((l) => /DNS controller skipped: local mode has no cluster/.test(l)).length, 1);
  assert.equal(server.lines.filter((l) => /iptables manager skipped: local mode has no cluster/.test(l)).length, 1);
  assert.equal(server.lines.filter((l) => /certificates created .*files=ca\.crt,tunnel-server\.crt,tunnel-proxy-client\.crt/.test(l)).length, 1);
  await issueAgentCert(s);
  // Killed, the agent is to the server a link that dropped; without session resume its clients close at once.
  const agent = await s.startAgent(['--resume-window', '0']);
  const res = await connectVia(s.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200);
  res.socket.write('still here?');
  assert.equal((await readExactly(res.socket, 11, res.rest)).toString(), 'still here?');
  const killedAt = performance.now();
  agent.kill('SIGKILL');
  res.socket.resume();
  await waitFor('the client connection to close', () => res.socket.destroyed, 1000);
  assert.ok(performance.now() - killedAt < 1000);
});

test('after a server restart the agent reconnects and traffic flows again', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const s = await setup(h);
  const server1 = await s.startServer();
  await issueAgentCert(s);
  const agent = await s.startAgent();
  server1.kill('SIGTERM');
  assert.equal(await server1.exited, 0, 'the server exits cleanly on SIGTERM');
  await agent.waitForLine(/lost connection to tunnel server/);
  await s.startServer();
  await waitFor('the agent to reconnect', () => agent.lines.filter((l) => /connected to tunnel server/.test(l)).length === 2, 10_000);
  const res = await connectVia(s.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200);
  res.socket.write('after restart');
  assert.equal((await readExactly(res.socket, 13, res.rest)).toString(), 'after restart');
  res.socket.destroy();
});

test('SIGTERM makes the agent send DRAIN and exit once its connections finish', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const s = await setup(h);
  const server = await s.startServer();
  await issueAgentCert(s);
  const agent = await s.startAgent(['--drain-timeout', '20s']);
  const res = await connectVia(s.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200);
  agent.kill('SIGTERM');
  await server.waitForLine(/agent is draining/);
  // The open connection keeps working while draining.
  res.socket.write('during drain');
  assert.equal((await readExactly(res.socket, 12, res.rest)).toString(), 'during drain');
  assert.equal(agent.child.exitCode, null, 'still running while a connection is open');
  res.socket.destroy();
  assert.equal(await agent.exited, 0);
  await server.waitForLine(/agent disconnected/);
});

test('SIGTERM during a 64 MiB transfer: no new clients, the transfer finishes byte-exact, then the server exits 0', async (t) => {
  const h = harness(t);
  const s = await setup(h);
  const server = await s.startServer();
  await issueAgentCert(s);
  await s.startAgent();
  const total = 64 * 1024 * 1024;
  const source = await startTCPServer(h, (sock) => writePattern(sock, total));
  const download = await connectVia(s.udsPath, `127.0.0.1:${source.port}`);
  assert.equal(download.status, 200);
  const verifier = new PatternVerifier();
  verifier.update(download.rest);
  // A reader slow enough that the transfer spans the shutdown: 1 MiB per 40 ms.
  let paced = 0;
  const done = new Promise<void>((resolve, reject) => {
    download.socket.on('data', (chunk: Buffer) => {
      verifier.update(chunk);
      paced += chunk.length;
      if (paced >= 1024 * 1024) {
        paced = 0;
        download.socket.pause();
        setTimeout(() => download.socket.resume(), 40);
      }
    });
    download.socket.once('end', resolve);
    download.socket.once('error', reject);
  });
  download.socket.resume();
  await waitFor('some of the transfer', () => verifier.received > 8 * 1024 * 1024, 10_000);
  server.kill('SIGTERM');
  await server.waitForLine(/shutting down: no new clients or agents/);
  // New clients are not taken any more.
  await assert.rejects(connectVia(s.udsPath, '127.0.0.1:1'), /ENOENT|ECONNREFUSED/);
  assert.ok(verifier.received < total, 'the transfer was still running when the server was told to stop');
  await done;
  assert.equal(verifier.received, total);
  assert.equal(await server.exited, 0);
  assert.ok(
    server.lines.some((l) => /every connection finished/.test(l)),
    server.lines.join('\n'),
  );
});
