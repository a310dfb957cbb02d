// The agent's link to the server reset again and again while its connections
// are busy, without session resume (issue 33): the real agent CLI, four
// connections each uploading and downloading at once, and a relay between
// agent and server that resets the link (RST to both ends) after every
// 0.25-0.5 s of full traffic, two dozen times. The agent process lives; each
// reset ends the connections it broke, with no byte doubled or wrong, and new
// ones work after it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startBlipRelay } from '../support/blip-relay.js';
import { assertAlive, busy, noticedAfter, open, startAgentProcess, startTarget, summary, whileAlive } from '../support/busy-link.js';
import { harness } from '../support/harness.js';
import { startServer, waitFor } from '../support/tunnel.js';

const RESETS = 24;
const CONNECTIONS = 4;
/** Traffic before each reset, 1-2 × this. */
const GAP_MS = 250;

test(
  'without session resume: 24 resets of a busy link, the agent process lives, broken connections end with no byte doubled or wrong, new ones work',
  { timeout: 120_000 },
  async (t) => {
    const h = harness(t);
    const target = await startTarget(h);
    // Without resume, gRPC keepalive is what notices a reset an HTTP/2 session holds unread behind a blocked
    // write, on either end (the server, most rounds): a ping after 0.3-0.5 s of quiet here, not after 10 s
    // (server) or 35 s (agent). Its answer may take 1 s: at load 12 a 300 ms bound dropped a live link under a
    // dial ("502 ... no answer to a keepalive ping within 300 ms").
    const server = await startServer(h, { endpoint: { minPingIntervalMs: 250, keepaliveTimeMs: 300, keepaliveTimeoutMs: 1000 } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    const agent = await startAgentProcess(h, `127.0.0.1:${relay.port}`, ['--resume-window', '0', '--keepalive-time', '500ms', '--keepalive-timeout', '1s']);
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
    assert.equal(server.tunnel.sessions.size, 0, 'no session resume');

    let nextID = 0;
    const resetAt: number[] = [];
    let moved = 0;
    for (let r = 0; r <= RESETS; r++) {
      const stream = server.tunnel.registry.streamsOf('edge-1')[0];
      const conns = await Promise.all(Array.from({ length: CONNECTIONS }, () => open(h, server, target, nextID++)));
      await busy(
        agent,
        conns,
        conns.map(() => ({ up: 0, down: 0 })),
        GAP_MS,
        r < RESETS ? `before reset ${r + 1}` : 'after the last reset',
      );
      if (r === RESETS) {
        for (const c of conns) {
          c.client.writer.finish();
          c.target()!.writer.finish();
        }
      } else {
        resetAt.push(performance.now());
        await relay.blip('reset', 100);
      }
      // Each end closes: cut by the reset, or (after the last) ended by both sides.
      await whileAlive(agent, `the connections of round ${r + 1} to close`, () => conns.every((c) => c.client.closed && c.target()!.closed), 10_000).catch(
        (err: unknown) => {
          const ends = conns.map((c) => `${c.id}: caller ${c.client.ended ?? 'open'}, target ${c.target()?.ended ?? 'open'}`).join('; ');
          throw new Error(`${(err as Error).message} (${ends}); the agent's last lines:\n${agent.proc.lines.slice(-15).join('\n')}`);
        },
      );
      for (const c of conns) {
        const t = c.target()!;
        assert.equal(c.client.wrong ?? t.wrong, undefined);
        assert.ok(t.verifier.received <= c.client.writer.sent && c.client.verifier.received <= t.writer.sent, 'nothing arrived that was not sent');
        moved += t.verifier.received + c.client.verifier.received;
        if (r === RESETS) {
          assert.equal(t.verifier.received, c.client.writer.sent);
          assert.equal(c.client.verifier.received, t.writer.sent);
        }
      }
      if (r < RESETS) {
        // Back is the agent's own new link, its only one: a loaded agent may read the reset late, and its probe
        // meanwhile is a stream on the server too, one the agent closes at once (a dial sent on it got a 502 here).
        const resetTime = resetAt[r]!;
        await whileAlive(
          agent,
          `the agent back after reset ${r + 1}`,
          () =>
            agent.timed.some((l) => l.at > resetTime && l.line.includes('connected to tunnel server')) &&
            server.tunnel.registry.streamsOf('edge-1').length === 1 &&
            server.tunnel.registry.streamsOf('edge-1')[0] !== stream,
          10_000,
        );
      }
    }
    const noticed = noticedAfter(agent, resetAt, /lost connection to tunnel server/);
    console.log(`resume off: ${RESETS} resets, ${Math.round(moved / 2 ** 20)} MiB moved; the agent noticed each after: ${summary(noticed)}`);
    assertAlive(agent, 'at the end');
  },
);
