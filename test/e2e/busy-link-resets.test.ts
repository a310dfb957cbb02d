// The agent's link to the server reset again and again while its connections
// are busy, with session resume (issue 33): the real agent CLI, four
// connections each uploading and downloading at once, and a relay between
// agent and server that resets the link (RST to both ends) after every 0.75-1.5 s
// of full traffic, two dozen times. The agent process lives, and every byte of
// each direction arrives once and in order.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertAlive, busy, endAndCount, noticedAfter, progress, startResumingBusyLink, summary, whileAlive } from '../support/busy-link.js';
import { harness } from '../support/harness.js';

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
    const { server, relay, agent, conns } = await startResumingBusyLink(h, windowMs, CONNECTIONS);
    const resetAt: number[] = [];
    for (let r = 0; r < RESETS; r++) {
      await busy(agent, conns, conns.map(progress), GAP_MS, `before reset ${r + 1}`);
      const resumes = server.log.find('agent link resumed').length;
      resetAt.push(performance.now());
      await relay.blip('reset', 100);
      await whileAlive(agent, `the resume after reset ${r + 1}`, () => server.log.find('agent link resumed').length > resumes, windowMs + 5000);
    }
    await busy(agent, conns, conns.map(progress), GAP_MS, 'after the last reset');

    await endAndCount(agent, conns);
    const moved = conns.reduce((n, c) => n + c.client.verifier.received + c.target()!.verifier.received, 0);
    assert.equal(server.log.find('agent session expired; closing its connections').length, 0, 'no session expired');
    const noticed = noticedAfter(agent, resetAt, /link to tunnel server dropped/);
    console.log(`resume on: ${RESETS} resets, ${Math.round(moved / 2 ** 20)} MiB moved; the agent noticed each after: ${summary(noticed)}`);
    assertAlive(agent, 'at the end');
  },
);
