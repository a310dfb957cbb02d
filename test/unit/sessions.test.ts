// The server's session seam (pkg/tunnel/sessions.ts): what an agent call's
// session claims decide, case by case (a fresh link, a resume, a token that
// finds nothing, a call still carrying the session superseded, a session that
// expired, another owner's token, a stale attempt, a count the session cannot
// resume from), on a real Tunnel with in-memory calls, and the packet path
// one way: from the call carrying a session to the packet switch, never from a
// call that no longer carries it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Registry } from '../../pkg/metrics/prom.js';
import { emptyIdentifiers } from '../../pkg/protocol/identifiers.js';
import type { SessionClaim } from '../../pkg/protocol/resume.js';
import type { AgentLink } from '../../pkg/tunnel/agent-link.js';
import type { SessionOwner } from '../../pkg/tunnel/session-table.js';
import type { AdmittedLink, Claim, SessionAnswer } from '../../pkg/tunnel/sessions.js';
import { Tunnel } from '../../pkg/tunnel/tunnel.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { RecordingLink } from '../support/recording-link.js';

const WINDOW_MS = 10_000;
const EDGE1: SessionOwner = { agentID: 'edge-1', fingerprint: 'AA:01', identityVerified: true };
const EDGE2: SessionOwner = { agentID: 'edge-2', fingerprint: 'AA:02', identityVerified: true };

/** An agent's call as the tunnel sees it: what went out on it. */
class Call extends RecordingLink {
  constructor() {
    super({ mayClose: true });
  }
}

/** A call through the seam as the agent endpoint makes it: claims, refusal, admit; what the answer said. */
interface Arrived {
  call: Call;
  claim: Claim | undefined;
  refused: string | undefined;
  admitted: AdmittedLink | undefined;
  answer: SessionAnswer | undefined;
  superseded: AgentLink | undefined;
}

function setup(t: { after(fn: () => unknown): void }): {
  tunnel: Tunnel;
  log: MemoryLogger;
  arrive: (owner: SessionOwner, claims?: SessionClaim[]) => Arrived;
} {
  const log = new MemoryLogger();
  const tunnel = new Tunnel({ logger: log, metricsRegistry: new Registry() });
  t.after(() => tunnel.close());
  const arrive = (owner: SessionOwner, claims: SessionClaim[] = []): Arrived => {
    const call = new Call();
    const out: Arrived = { call, claim: undefined, refused: undefined, admitted: undefined, answer: undefined, superseded: undefined };
    out.claim = claims.length > 0 ? tunnel.sessions.claim(claims, owner) : undefined;
    out.refused = out.claim === undefined ? undefined : tunnel.sessions.refusal(out.claim, owner.agentID, '127.0.0.1:1');
    if (out.refused !== undefined) return out;
    const info = { agentID: owner.agentID, identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:1', certSubject: `CN=${owner.agentID}` };
    out.admitted = tunnel.sessions.admit({
      link: call,
      info,
      owner,
      windowMs: WINDOW_MS,
      claim: out.claim,
      answer: (session, superseded) => {
        assert.equal(out.answer, undefined, 'answered once');
        out.answer = session;
        out.superseded = superseded;
      },
    });
    return out;
  };
  return { tunnel, log, arrive };
}

/** Packets the agent sends that the switch takes without a trace: DIAL_CLS for a dial that is not pending. */
function deliver(a: Arrived, n: number): void {
  for (let i = 0; i < n; i++) a.admitted!.receive({ type: 'DIAL_CLS', random: BigInt(i + 1) });
}

const failed = { kind: 'failed', message: 'connection reset' } as const;

test('a call without claims gets a fresh session, its token in the answer; without a window, no session', (t) => {
  const { tunnel, arrive } = setup(t);
  const a = arrive(EDGE1);
  assert.equal(a.admitted!.resumed, false);
  assert.equal(a.answer!.windowMs, WINDOW_MS);
  assert.match(a.answer!.token, /^[\w-]+\.[\w-]+$/);
  assert.equal(a.answer!.received, undefined, 'a fresh session is not a resume');
  assert.equal(tunnel.sessions.size, 1);
  assert.equal(a.admitted!.backend.sessionLink?.transport, a.call);

  const plain = new Call();
  let answered: SessionAnswer | undefined | 'not yet' = 'not yet';
  const info = { agentID: 'edge-3', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:2', certSubject: '' };
  const b = tunnel.sessions.admit({
    link: plain,
    info,
    owner: EDGE2,
    windowMs: undefined,
    claim: undefined,
    answer: (s) => {
      answered = s;
    },
  });
  assert.equal(answered, undefined, 'answered without a session part');
  assert.equal(b.backend.session, undefined);
  assert.equal(tunnel.sessions.size, 1);
  b.ended(failed);
  assert.equal(b.backend.closed, true, 'without a session a failure ends the link');
});

test('a suspended session is taken back by its owner: same backend, the count in the answer, no longer suspended', (t) => {
  const { tunnel, log, arrive } = setup(t);
  const a = arrive(EDGE1);
  deliver(a, 3);
  a.admitted!.ended(failed);
  assert.equal(tunnel.sessions.suspendedCount, 1, 'a failure suspends the session');
  assert.equal(a.admitted!.backend.closed, false);

  const b = arrive(EDGE1, [{ token: a.answer!.token, received: 0, attempt: 1 }]);
  assert.equal(b.refused, undefined);
  assert.equal(b.admitted!.resumed, true);
  assert.equal(b.admitted!.backend, a.admitted!.backend, 'the same connections carry on');
  assert.deepEqual(b.answer, { windowMs: WINDOW_MS, token: a.answer!.token, received: 3 });
  assert.equal(tunnel.sessions.suspendedCount, 0);
  assert.equal(tunnel.sessions.size, 1);
  assert.equal(log.find('agent link resumed').length, 1);
  deliver(b, 2);
  assert.equal(b.admitted!.backend.sessionLink!.received, 5, 'the new call feeds the session');
});

test('a call still carrying the session is superseded by a resume: what it still delivers, and its end, change nothing', (t) => {
  const { tunnel, arrive } = setup(t);
  const a = arrive(EDGE1);
  deliver(a, 1);
  const b = arrive(EDGE1, [{ token: a.answer!.token, received: 0, attempt: 1 }]);
  assert.equal(b.admitted!.resumed, true);
  assert.equal(b.superseded, a.call, 'the answer names the call to drop');
  const link = b.admitted!.backend.sessionLink!;
  assert.equal(link.transport, b.call);
  deliver(a, 4);
  assert.equal(link.received, 1, 'nothing from the superseded call is taken');
  a.admitted!.ended(failed);
  assert.equal(tunnel.sessions.suspendedCount, 0, "the superseded call's end does not suspend the session");
  assert.equal(b.admitted!.backend.closed, false);
  deliver(b, 1);
  assert.equal(link.received, 2);
});

test('a token that finds nothing here, or another owner presenting a right one, gets a fresh session; the owner is untouched', (t) => {
  const { tunnel, log, arrive } = setup(t);
  const a = arrive(EDGE1);
  a.admitted!.ended(failed);
  const [id] = a.answer!.token.split('.');
  const unknown = arrive(EDGE1, [{ token: `${id}.${'A'.repeat(43)}`, received: 0, attempt: 1 }]);
  assert.equal(unknown.claim!.unknown, 1);
  assert.equal(unknown.admitted!.resumed, false);
  assert.notEqual(unknown.answer!.token, a.answer!.token);

  const foreign = arrive(EDGE2, [{ token: a.answer!.token, received: 0, attempt: 1 }]);
  assert.equal(foreign.refused, undefined, 'a foreign claim is not honoured, the call goes on');
  assert.equal(foreign.admitted!.resumed, false);
  assert.notEqual(foreign.admitted!.backend, a.admitted!.backend);
  assert.equal(log.find('session token presented with another certificate or agentID; not honoured').length, 1);
  const session = a.admitted!.backend.session!;
  assert.equal(session.suspended, true, "the owner's session still waits for it");
  assert.equal(session.resumes, 0);
  assert.equal(tunnel.sessions.size, 3);
});

test('a stale attempt that finds nothing refuses the call; a count the session cannot have ends it', (t) => {
  const { tunnel, arrive } = setup(t);
  const a = arrive(EDGE1);
  a.admitted!.ended(failed);
  const b = arrive(EDGE1, [{ token: a.answer!.token, received: 0, attempt: 2 }]);
  assert.equal(b.admitted!.resumed, true);
  b.admitted!.ended(failed);
  const late = arrive(EDGE1, [{ token: a.answer!.token, received: 0, attempt: 2 }]);
  assert.equal(late.refused, 'stale resume attempt: a newer call has taken the session');
  assert.equal(late.admitted, undefined);
  assert.equal(tunnel.sessions.suspendedCount, 1, 'the session still waits for a newer attempt');

  // Nothing went to the agent yet, so it cannot have received 5 packets.
  const wrong = arrive(EDGE1, [{ token: a.answer!.token, received: 5, attempt: 3 }]);
  assert.equal(wrong.admitted!.resumed, false, 'the call is a fresh link');
  assert.equal(a.admitted!.backend.closed, true, 'the session ended');
  assert.equal(tunnel.sessions.size, 1, 'the fresh one only');
});

test('a claim on a session that expired here is told so, and gets a fresh session', async (t) => {
  const log = new MemoryLogger();
  const tunnel = new Tunnel({ logger: log, metricsRegistry: new Registry() });
  t.after(() => tunnel.close());
  const call = new Call();
  let token = '';
  const info = { agentID: 'edge-1', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:1', certSubject: '' };
  const a = tunnel.sessions.admit({
    link: call,
    info,
    owner: EDGE1,
    windowMs: 30,
    claim: undefined,
    answer: (s) => {
      token = s!.token;
    },
  });
  a.ended(failed);
  await sleep(80);
  assert.equal(a.backend.closed, true, 'the window passed');
  assert.equal(log.find('agent session expired; closing its connections')[0]?.fields.reason, 'window');
  const claim = tunnel.sessions.claim([{ token, received: 0, attempt: 1 }], EDGE1);
  assert.equal(claim.found, undefined);
  assert.equal(claim.ended.length, 1);
  assert.equal(tunnel.sessions.refusal(claim, 'edge-1', '127.0.0.1:1'), undefined);
  assert.equal(log.find('session claim on a session that is over here; the agent gets a fresh one').length, 1);
});
