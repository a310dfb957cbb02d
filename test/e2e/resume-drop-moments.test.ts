// Session resume's byte promise at the moments a drop can land around a
// resume (issue 33's busy link; busy-link-resets.test.ts resets only after
// seconds of traffic): the real agent CLI, four connections busy both ways,
// and the link dropped again 0-150 ms after each resume, while what the
// last drop left unacknowledged is being resent. The drops take every shape
// the resume path tells apart: a reset of both ends, a path that goes dark
// and whose server end alone is reset (the server suspends first, the agent
// notices by its liveness watch), and a dark path the agent's resume
// supersedes (the server still holds the call). Every byte of each direction arrives once,
// in order, and no session expires.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { BlipRelay } from '../support/blip-relay.js';
import { assertAlive, assertNoWrongBytes, endAndCount, progress, startResumingBusyLink, whileAlive } from '../support/busy-link.js';
import { harness } from '../support/harness.js';

const CONNECTIONS = 4;
/** Each kind this many times, in turn. */
const ROUNDS = 5;
/** The next drop comes this long after a resume at most: mostly while the replay is still on the wire. */
const AFTER_RESUME_MS = 150;

type Drop = 'reset' | 'dark-then-server-reset' | 'dark';

async function drop(kind: Drop, relay: BlipRelay): Promise<void> {
  switch (kind) {
    case 'reset':
      await relay.blip('reset', 20 + Math.random() * 80);
      return;
    case 'dark-then-server-reset':
      relay.freeze();
      await sleep(50 + Math.random() * 250);
      relay.resetDark('server');
      relay.heal();
      return;
    case 'dark':
      // Longer than the agent's liveness bound (half of its 3 s window): it resumes over a new connection.
      await relay.blip('silent', 1600 + Math.random() * 600);
      return;
  }
}

test(
  'with session resume: drops of three kinds 0-150 ms after each resume of a busy link, and every byte of 4 connections arrives once, in order, both ways',
  { timeout: 180_000 },
  async (t) => {
    const h = harness(t);
    const windowMs = 3000;
    const { server, relay, agent, conns } = await startResumingBusyLink(h, windowMs, CONNECTIONS);
    const movedSince = (from: Array<{ up: number; down: number }>, bytes: number): boolean =>
      conns.every((c, i) => {
        const now = progress(c);
        return now.up >= from[i]!.up + bytes && now.down >= from[i]!.down + bytes;
      });
    let from = conns.map(progress);
    await whileAlive(agent, 'traffic on every connection', () => movedSince(from, 1 << 20), 20_000);

    const kinds: Drop[] = ['reset', 'dark-then-server-reset', 'dark'];
    let resent = 0;
    for (let r = 0; r < ROUNDS * kinds.length; r++) {
      const kind = kinds[r % kinds.length]!;
      assertNoWrongBytes(conns, `before drop ${r + 1} (${kind})`);
      const resumes = server.log.find('agent link resumed').length;
      await drop(kind, relay);
      await whileAlive(agent, `the resume after drop ${r + 1} (${kind})`, () => server.log.find('agent link resumed').length > resumes, windowMs + 5000);
      resent += Number(server.log.find('agent link resumed').at(-1)?.fields.resentPackets ?? 0);
      await sleep(Math.random() * AFTER_RESUME_MS);
    }
    // Traffic goes on after the last drop, then each direction ends and is counted.
    from = conns.map(progress);
    await whileAlive(
      agent,
      'traffic after the last drop',
      () => {
        assertNoWrongBytes(conns, 'after the last drop');
        return movedSince(from, 256 * 1024);
      },
      20_000,
    );
    await endAndCount(agent, conns);
    assert.equal(server.log.find('agent session expired; closing its connections').length, 0, 'no session expired');
    // The drops came while there was something to resend: the test exercised the replay, not only idle resumes.
    assert.ok(resent > 0, `the server resent packets on its resumes (${resent})`);
    console.log(`${ROUNDS * kinds.length} drops; the server resent ${resent} packets on its resumes`);
    assertAlive(agent, 'at the end');
  },
);
