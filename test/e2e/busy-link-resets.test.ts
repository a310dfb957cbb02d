// The agent's link to the server reset again and again while its connections
// are busy, with session resume (issue 33): the real agent CLI, four
// connections each uploading and downloading at once, and a relay between
// agent and server that resets the link (RST to both ends) after every 0.75-1.5 s
// of full traffic, two dozen times. The agent process lives, and every byte of
// each direction arrives once and in order.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startBlipRelay } from '../support/blip-relay.js';
import { assertAlive, busy, noticedAfter, open, progress, startAgentProcess, startTarget, summary, whileAlive, type Connection } from '../support/busy-link.js';
import { harness } from '../support/harness.js';
import { startServer, waitFor } from '../support/tunnel.js';

const RESETS = 24;
const CONNECTIONS = 4;
/**
 * Traffic before each reset, 1-2 × this. The crash of issue 33 (the agent forcing its HTTP/2 session's socket to
 * read) came when a reset hit a link busy long enough to hold megabytes in flight, as they were resent: with
 * this gap it killed the agent in 4 runs of 5; the longer the gap the likelier (0.25-0.5 s: 1 run of 5).
 */
const GAP_MS = 750;

test(
  'with session resume: 24 resets of a busy link, the agent process lives and every byte of 4 connections arrives once, in order, both ways',
  { timeout: 120_000 },
  async (t) => {
    const h = harness(t);
    const windowMs = 3000;
    const target = await startTarget(h);
    const server = await startServer(h, { endpoint: { resumeWindowMs: windowMs } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    const agent = await startAgentProcess(h, `127.0.0.1:${relay.port}`, ['--resume-window', `${windowMs}ms`]);
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
    assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

    const conns: Connection[] = [];
    for (let id = 0; id < CONNECTIONS; id++) conns.push(await open(h, server, target, id));
    const resetAt: number[] = [];
    for (let r = 0; r < RESETS; r++) {
      await busy(agent, conns, conns.map(progress), GAP_MS, `before reset ${r + 1}`);
      const resumes = server.log.find('agent link resumed').length;
      resetAt.push(performance.now());
      await relay.blip('reset', 100);
      await whileAlive(agent, `the resume after reset ${r + 1}`, () => server.log.find('agent link resumed').length > resumes, windowMs + 5000);
    }
    await busy(agent, conns, conns.map(progress), GAP_MS, 'after the last reset');

    for (const c of conns) {
      c.client.writer.finish();
      c.target()!.writer.finish();
    }
    await whileAlive(agent, 'every stream to end', () => conns.every((c) => c.client.ended !== undefined && c.target()!.ended !== undefined), 30_000);
    for (const c of conns) {
      const t = c.target()!;
      assert.equal(c.client.wrong ?? t.wrong, undefined);
      assert.equal(t.ended, 'end', `connection ${c.id}: the upload ended normally`);
      assert.equal(c.client.ended, 'end', `connection ${c.id}: the download ended normally`);
      assert.equal(t.verifier.received, c.client.writer.sent, `connection ${c.id}: every byte uploaded arrived once`);
      assert.equal(c.client.verifier.received, t.writer.sent, `connection ${c.id}: every byte downloaded arrived once`);
    }
    const moved = conns.reduce((n, c) => n + c.client.verifier.received + c.target()!.verifier.received, 0);
    assert.equal(server.log.find('agent session expired; closing its connections').length, 0, 'no session expired');
    const noticed = noticedAfter(agent, resetAt, /link to tunnel server dropped/);
    console.log(`resume on: ${RESETS} resets, ${Math.round(moved / 2 ** 20)} MiB moved; the agent noticed each after: ${summary(noticed)}`);
    assertAlive(agent, 'at the end');
  },
);
