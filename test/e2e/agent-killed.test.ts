// An agent killed (kill -9) mid-download and NOT started again: on loopback
// the kernel closes its sockets at once, so the server must learn of the dead
// link at once too, suspend its session, and fail its callers when the resume
// window passes, not after keepalive gives up first (~35 s, then the window).
// With a fast caller and with a slow one (whose full buffer pauses the
// agent's HTTP/2 stream). The real agent CLI, as a child process. Whether
// node:http2 reads the reset varies from kill to kill (a fast caller's link:
// about half the time not, until keepalive), so the fast caller's agent is
// killed a few times over.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { harness, type Harness } from '../support/harness.js';
import { testPKI, writePKIFiles } from '../support/pki.js';
import { startEdgeAgentProcess, watchEnd } from '../support/processes.js';
import { startFirehose, startServer, tempDir, waitFor } from '../support/tunnel.js';

const MiB = 1024 * 1024;
/** The server's resume window here: short, so that the test is; keepalive (10 s interval) stays as deployed. */
const RESUME_WINDOW_MS = 2000;
/** How long after the kill the download must have failed: the flow watch's look and 3 s check, the window, and room for a loaded machine. */
const BOUND_MS = RESUME_WINDOW_MS + 3500 + 2500;
/** Kills of an agent with a fast caller: each went unnoticed (without AgentConnection's flow watch) in about half the runs. */
const FAST_ROUNDS = 4;
/** How long the test waits for it: well under the ~35 s keepalive would take. */
const WAIT_MS = BOUND_MS + 6000;

async function killMidDownload(h: Harness, caller: 'fast' | 'slow'): Promise<void> {
  const firehose = await startFirehose(h);
  const server = await startServer(h, { endpoint: { resumeWindowMs: RESUME_WINDOW_MS } });
  const pki = testPKI();
  const files = await writePKIFiles(await tempDir(h), pki.agent('edge-1', 'ipv4=127.0.0.1&host=edge-1'), pki.ca);
  const agent = startEdgeAgentProcess(h, server.agentAddress, files);
  await agent.waitForLine(/connected to tunnel server/, 20_000);
  await waitFor('edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

  const download = await server.tunnel.dial(`127.0.0.1:${firehose.port}`);
  h.defer(() => download.destroy());
  let received = 0;
  const endOf = watchEnd(download);
  if (caller === 'fast') {
    download.on('data', (c: Buffer) => (received += c.length));
    await waitFor('the download to flow', () => received > 4 * MiB, 10_000);
  } else {
    // A caller that read a little and then stopped: the connection's buffer fills and the link's stream is paused.
    const firstBytes = (c: Buffer): void => {
      received += c.length;
      if (received > MiB) {
        download.off('data', firstBytes);
        download.pause();
      }
    };
    download.on('data', firstBytes);
    await waitFor('the download to flow and back up', () => download.readableLength > 0 && received > MiB, 10_000);
    await new Promise((r) => setTimeout(r, 300));
  }

  agent.kill('SIGKILL');
  const killedAt = performance.now();
  await agent.exited;
  // The slow caller reads only to see the end: a paused stream emits no 'error' until its buffer is read or it is destroyed.
  if (caller === 'slow') download.resume();
  await waitFor('the download to fail', () => endOf() !== undefined, WAIT_MS).catch(() => undefined);
  const ended = endOf();
  const dropped = server.log.find('agent link dropped; keeping its connections for the resume window')[0];
  const endedAfter = ended === undefined ? undefined : Math.round(ended.at - killedAt);
  console.log(
    `${caller} caller: the server heard of the dead link ${dropped === undefined ? 'never (in the test)' : `${Math.round(dropped.at - killedAt)} ms`} ` +
      `after the kill; the download ended ${endedAfter === undefined ? `not within ${WAIT_MS} ms` : `${endedAfter} ms after it (${ended!.how} ${(ended!.err as { code?: string } | undefined)?.code})`}`,
  );
  assert.ok(endedAfter !== undefined && endedAfter < BOUND_MS, `the download failed ${endedAfter ?? `not within ${WAIT_MS}`} ms after the agent was killed`);
  assert.equal(ended!.how, 'error', 'the download ended as a failure, not a clean end');
  assert.equal((ended!.err as { code?: string }).code, 'YT_ERR_AGENT_LOST');
}

test('an agent killed mid-download (fast caller): the server notices at once, the download fails when the window passes', { timeout: 90_000 }, async (t) => {
  const h = harness(t);
  for (let round = 0; round < FAST_ROUNDS; round++) await killMidDownload(h, 'fast');
});

test('an agent killed mid-download (slow caller): the server notices at once, the download fails when the window passes', { timeout: 40_000 }, async (t) => {
  await killMidDownload(harness(t), 'slow');
});
