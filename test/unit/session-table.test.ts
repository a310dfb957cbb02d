// The server's resumable sessions (pkg/tunnel/session-table.ts): tokens bound
// to the agentID and certificate that opened them, one unref'd timer per
// suspended session that ends it when its window passes, and the bounds.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { inspect } from 'node:util';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { parseSessionToken } from '../../pkg/protocol/resume.js';
import type { SessionExpiry } from '../../pkg/tunnel/resume-metrics.js';
import { SessionTable, type Session } from '../../pkg/tunnel/session-table.js';
import { harness } from '../support/harness.js';

// With --agent-identity-check none: nothing ties the agentID to the certificate.
const EDGE1 = { agentID: 'edge-1', fingerprint: 'AA:BB:01', identityVerified: false };
const EDGE2 = { agentID: 'edge-2', fingerprint: 'AA:BB:02', identityVerified: false };

function table(
  onExpire: (s: Session<string>, suspendedForMs: number | undefined, reason: SessionExpiry) => void = () => {},
  maxSuspendedPerAgent?: number,
): SessionTable<string> {
  return new SessionTable<string>({ onExpire, ...(maxSuspendedPerAgent !== undefined ? { maxSuspendedPerAgent } : {}) });
}

test('a token finds its session only with the agentID and certificate that opened it, and only for a newer attempt', (t) => {
  const sessions = table();
  t.after(() => sessions.close());
  const { session, token } = sessions.open(EDGE1, 10_000, 'links of edge-1');
  const parsed = parseSessionToken(token);
  assert.ok(parsed !== undefined, 'the token has the wire form');
  assert.equal(parsed.id, session.id);
  assert.deepEqual(sessions.find({ token, received: 0, attempt: 1 }, EDGE1), { kind: 'found', session });

  // Right token, wrong holder: refused, and the session is left as it was.
  assert.deepEqual(sessions.find({ token, received: 0, attempt: 1 }, EDGE2), { kind: 'foreign', session });
  assert.deepEqual(sessions.find({ token, received: 0, attempt: 1 }, { ...EDGE1, fingerprint: EDGE2.fingerprint }), { kind: 'foreign', session });
  assert.deepEqual(sessions.find({ token, received: 0, attempt: 1 }, { ...EDGE2, fingerprint: EDGE1.fingerprint }), { kind: 'foreign', session });
  assert.equal(session.resumes, 0);

  const otherSecret = `${session.id}.${'A'.repeat(43)}`;
  assert.deepEqual(sessions.find({ token: otherSecret, received: 0, attempt: 1 }, EDGE1), { kind: 'unknown', reason: 'wrong-secret' });
  const otherID = `${'B'.repeat(22)}.${parsed.secret}`;
  assert.deepEqual(sessions.find({ token: otherID, received: 0, attempt: 1 }, EDGE1), { kind: 'unknown', reason: 'no-session' });
  assert.deepEqual(sessions.find({ token: 'nonsense', received: 0, attempt: 1 }, EDGE1), { kind: 'unknown', reason: 'malformed' });

  assert.equal(sessions.take(session, 3), true);
  assert.equal(session.resumes, 1);
  for (const attempt of [1, 3]) {
    assert.deepEqual(sessions.find({ token, received: 0, attempt }, EDGE1), { kind: 'stale', session }, `attempt ${attempt} after 3 was taken`);
  }
  assert.deepEqual(sessions.find({ token, received: 0, attempt: 4 }, EDGE1), { kind: 'found', session });
});

test('with the identity check on, a renewed certificate naming the same agent takes its session back; another agent never does', (t) => {
  const sessions = table();
  t.after(() => sessions.close());
  const verified = (agentID: string, fingerprint: string): { agentID: string; fingerprint: string; identityVerified: boolean } => ({
    agentID,
    fingerprint,
    identityVerified: true,
  });
  const { session, token } = sessions.open(verified('edge-1', 'AA:BB:01'), 10_000, 'links of edge-1');
  const claim = { token, received: 0, attempt: 1 };
  assert.deepEqual(sessions.find(claim, verified('edge-1', 'AA:BB:01')), { kind: 'found', session });
  assert.deepEqual(sessions.find(claim, verified('edge-1', 'CC:DD:99')), { kind: 'found', session }, 'a renewed certificate of edge-1');
  // Another agent's certificate, even one the check verified for its own agentID.
  assert.deepEqual(sessions.find(claim, verified('edge-2', 'AA:BB:01')), { kind: 'foreign', session });
  assert.deepEqual(sessions.find(claim, verified('edge-2', 'CC:DD:99')), { kind: 'foreign', session });
  // A caller the check did not verify (it cannot be: one server, one mode; the rule holds anyway) needs the very certificate.
  assert.deepEqual(sessions.find(claim, { agentID: 'edge-1', fingerprint: 'CC:DD:99', identityVerified: false }), { kind: 'foreign', session });
  // Without a certificate there is no owner.
  assert.deepEqual(sessions.find(claim, verified('edge-1', '')), { kind: 'foreign', session });

  // A session opened without the check stays bound to its certificate.
  const unverified = sessions.open(EDGE1, 10_000, 'opened with the check off');
  assert.deepEqual(sessions.find({ token: unverified.token, received: 0, attempt: 1 }, verified('edge-1', 'CC:DD:99')), {
    kind: 'foreign',
    session: unverified.session,
  });
  assert.deepEqual(sessions.find({ token: unverified.token, received: 0, attempt: 1 }, EDGE1), { kind: 'found', session: unverified.session });
  assert.equal(session.resumes, 0);
});

test("one call's claims: the first this server can hand back, and the refused ones by why", (t) => {
  const sessions = table();
  t.after(() => sessions.close());
  const mine = sessions.open(EDGE1, 10_000, 'mine');
  const second = sessions.open(EDGE1, 10_000, 'second');
  const someoneElses = sessions.open(EDGE2, 10_000, 'edge-2');
  sessions.take(second.session, 5);
  const otherReplica = `${'C'.repeat(22)}.${'D'.repeat(43)}`;
  const r = sessions.resolve(
    [
      { token: otherReplica, received: 0, attempt: 1 },
      { token: someoneElses.token, received: 0, attempt: 1 },
      { token: second.token, received: 0, attempt: 2 },
      { token: mine.token, received: 7, attempt: 1 },
    ],
    EDGE1,
  );
  assert.deepEqual(r.found, { session: mine.session, claim: { token: mine.token, received: 7, attempt: 1 } });
  assert.deepEqual(r.foreign, [someoneElses.session]);
  assert.deepEqual(r.stale, [second.session]);
  assert.equal(r.unknown, 1);
  assert.deepEqual(sessions.resolve([], EDGE1), { found: undefined, foreign: [], stale: [], ended: [], unknown: 0 });
  assert.equal(mine.session.resumes, 0, 'resolving takes nothing');
});

test('a claim on a session that is over is told apart from one never issued here: how it ended, when, whose; bounded', (t) => {
  const sessions = table();
  t.after(() => sessions.close());
  const expiring = sessions.open(EDGE1, 10_000, 'expires');
  const ending = sessions.open(EDGE1, 10_000, 'ends');
  const endedAt = Date.now();
  sessions.end(ending.session, 'ended', endedAt);
  sessions.end(expiring.session, 'expired', endedAt + 1);
  assert.deepEqual(sessions.find({ token: ending.token, received: 0, attempt: 1 }, EDGE1), {
    kind: 'ended',
    ended: { id: ending.session.id, agentID: 'edge-1', how: 'ended', endedAt },
  });
  const r = sessions.resolve([{ token: expiring.token, received: 0, attempt: 1 }], EDGE1);
  assert.deepEqual(r.ended, [{ id: expiring.session.id, agentID: 'edge-1', how: 'expired', endedAt: endedAt + 1 }]);
  assert.equal(r.found, undefined);
  // The ID alone proves nothing: with a wrong secret it is unknown, as any guess.
  assert.deepEqual(sessions.find({ token: `${ending.session.id}.${'A'.repeat(43)}`, received: 0, attempt: 1 }, EDGE1), {
    kind: 'unknown',
    reason: 'no-session',
  });
  // Only so many are remembered: the oldest are forgotten first.
  for (let i = 0; i < 1024; i++) sessions.end(sessions.open(EDGE2, 10_000, 'filler').session);
  assert.deepEqual(sessions.find({ token: ending.token, received: 0, attempt: 1 }, EDGE1), { kind: 'unknown', reason: 'no-session' });
  assert.equal(sessions.size, 0);
});

test('only a hash of the secret is kept', (t) => {
  const sessions = table();
  t.after(() => sessions.close());
  const { session, token } = sessions.open(EDGE1, 10_000, 'v');
  const secret = parseSessionToken(token)!.secret;
  const shown = inspect(sessions, { depth: 10 }) + inspect(session, { depth: 10, showHidden: true });
  assert.ok(!shown.includes(secret), 'the secret is nowhere in the table');
  assert.ok(!shown.includes(Buffer.from(secret, 'base64url').toString('hex')));
});

test('a suspended session ends when its window passes: out of the table, its timer gone, onExpire once', async (t) => {
  const h = harness(t);
  const expired: Session<string>[] = [];
  const suspendedFor: Array<number | undefined> = [];
  const sessions = new SessionTable<string>({
    onExpire: (s, ms, reason) => {
      expired.push(s);
      suspendedFor.push(ms);
      assert.equal(reason, 'window');
    },
  });
  h.defer(() => sessions.close());
  const { session } = sessions.open(EDGE1, 50, 'conns');
  const startedAt = performance.now();
  sessions.suspend(session);
  sessions.suspend(session); // idempotent: one timer, from the first drop
  assert.equal(session.suspended, true);
  assert.deepEqual([sessions.size, sessions.suspendedCount], [1, 1]);
  await waitUntil(() => expired.length > 0);
  assert.ok(performance.now() - startedAt >= 45, 'not before the window');
  assert.deepEqual(expired, [session]);
  assert.ok(suspendedFor[0] !== undefined && suspendedFor[0] >= 45, `told how long it was suspended (${suspendedFor[0]} ms)`);
  assert.deepEqual([sessions.size, sessions.suspendedCount], [0, 0]);
  assert.equal(session.timer, undefined);
  assert.equal(sessions.take(session, 1), false, 'an expired session cannot be taken');
});

test('a session taken back before its window does not expire; a goodbye ends one without onExpire', async (t) => {
  const h = harness(t);
  const expired: string[] = [];
  const sessions = table((s) => expired.push(s.value));
  h.defer(() => sessions.close());
  const resumed = sessions.open(EDGE1, 40, 'resumed').session;
  sessions.suspend(resumed);
  assert.equal(sessions.take(resumed, 1), true);
  assert.equal(resumed.suspended, false);
  assert.equal(resumed.timer, undefined);
  // A witness suspended after it with the same window: once it has expired, the first would have too.
  const witness = sessions.open(EDGE2, 40, 'witness').session;
  sessions.suspend(witness);
  const goodbye = sessions.open(EDGE2, 40, 'goodbye').session;
  sessions.suspend(goodbye);
  assert.equal(sessions.end(goodbye), true);
  assert.equal(sessions.end(goodbye), false);
  await waitUntil(() => expired.includes('witness'));
  assert.deepEqual(expired, ['witness']);
  assert.deepEqual([sessions.size, sessions.suspendedCount], [1, 0]);
});

test("past maxSuspendedPerAgent the agent's oldest suspended session expires at once; other agents are untouched", (t) => {
  const expired: string[] = [];
  const sessions = table((s, _ms, reason) => expired.push(`${s.value} ${reason}`), 2);
  t.after(() => sessions.close());
  const a = sessions.open(EDGE1, 60_000, 'a').session;
  const b = sessions.open(EDGE1, 60_000, 'b').session;
  const c = sessions.open(EDGE1, 60_000, 'c').session;
  const other = sessions.open(EDGE2, 60_000, 'other').session;
  sessions.suspend(other);
  sessions.suspend(a);
  sessions.suspend(b);
  assert.deepEqual(expired, []);
  sessions.suspend(c);
  assert.deepEqual(expired, ['a superseded_limit']);
  assert.deepEqual([sessions.size, sessions.suspendedCount], [3, 3]);
  assert.equal(a.timer, undefined);
  assert.throws(() => table(() => {}, 0), TypeError);
});

test('suspended sessions in the order they were suspended, across agents; one expired early says why, once', (t) => {
  const expired: string[] = [];
  const sessions = table((s, ms, reason) => expired.push(`${s.value} ${reason} ${typeof ms}`));
  t.after(() => sessions.close());
  const a = sessions.open(EDGE2, 60_000, 'a').session;
  const b = sessions.open(EDGE1, 60_000, 'b').session;
  const c = sessions.open(EDGE2, 60_000, 'c').session;
  const live = sessions.open(EDGE1, 60_000, 'live').session;
  sessions.suspend(b);
  sessions.suspend(a);
  sessions.suspend(c);
  assert.deepEqual(
    sessions.suspendedOldestFirst().map((s) => s.value),
    ['b', 'a', 'c'],
  );
  // A session taken back leaves the order; suspended again, it is the newest.
  assert.equal(sessions.take(b, 1), true);
  sessions.suspend(b);
  assert.deepEqual(
    sessions.suspendedOldestFirst().map((s) => s.value),
    ['a', 'c', 'b'],
  );
  assert.equal(sessions.expireEarly(live, 'YT_ERR_RESUME_BUDGET'), false, 'a live session is not expired');
  assert.equal(sessions.expireEarly(a, 'YT_ERR_RESUME_BUDGET'), true);
  assert.equal(sessions.expireEarly(a, 'YT_ERR_RESUME_BUDGET'), false, 'once');
  assert.deepEqual(expired, ['a YT_ERR_RESUME_BUDGET number']);
  assert.equal(a.timer, undefined);
  assert.deepEqual([sessions.size, sessions.suspendedCount], [3, 2]);
  assert.deepEqual(
    sessions.suspendedOldestFirst().map((s) => s.value),
    ['c', 'b'],
  );
});

test('close forgets every session and stops every timer without onExpire', (t) => {
  const expired: string[] = [];
  const sessions = table((s) => expired.push(s.value));
  t.after(() => sessions.close());
  const all = [1, 2, 3].map((i) => sessions.open({ agentID: `edge-${i}`, fingerprint: `F${i}`, identityVerified: false }, 60_000, `s${i}`).session);
  for (const s of all) sessions.suspend(s);
  sessions.close();
  assert.deepEqual([sessions.size, sessions.suspendedCount, expired.length], [0, 0, 0]);
  assert.deepEqual(sessionsOfAll(sessions), []);
});

test("a suspended session's timer does not keep the process alive (unref'd)", async () => {
  const url = new URL('../../pkg/tunnel/session-table.js', import.meta.url);
  const worker = new Worker(
    `import(${JSON.stringify(fileURLToPath(url))}).then(({ SessionTable }) => {
       const t = new SessionTable({ onExpire() {} });
       t.suspend(t.open({ agentID: 'edge-1', fingerprint: 'F' }, 600000, 'v').session);
     });`,
    { eval: true },
  );
  let guard: NodeJS.Timeout | undefined;
  const lingered = new Promise<'lingered'>((resolve) => (guard = setTimeout(() => resolve('lingered'), 20_000)));
  const ended = once(worker, 'exit').then(([code]) => code as number);
  const outcome = await Promise.race([ended, lingered]);
  clearTimeout(guard);
  if (outcome === 'lingered') await worker.terminate();
  assert.equal(outcome, 0, 'the worker ended by itself long before the 10-minute window');
});

function sessionsOfAll(sessions: SessionTable<string>): string[] {
  return ['edge-1', 'edge-2', 'edge-3'].flatMap((id) => sessions.sessionsOf(id).map((s) => s.value));
}

async function waitUntil(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const keep = setInterval(() => {}, 1000); // the table's timers are unref'd
  try {
    while (!cond()) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 2));
    }
  } finally {
    clearInterval(keep);
  }
}
