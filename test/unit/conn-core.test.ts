// The connection core (pkg/mux/conn-core.ts) as one table: each row drives a
// core through the peer's packets and our end, and names the packets the
// link carried and where both state machines stand. The Duplex and the
// socket shapes run on this core; connection.test.ts runs the connection's
// cases against both, with what is theirs (bytes, back-pressure, sockets).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { AGENT_CLOSE, SERVER_CLOSE, SERVER_CLOSE_WITH_ERROR, type CloseRole } from '../../pkg/mux/close-handshake.js';
import { ConnCore, LocalState, PeerState, type ConnCoreOptions } from '../../pkg/mux/conn-core.js';
import { ConnectionClosedError, ConnectionStalledError } from '../../pkg/protocol/errors.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { harness } from '../support/harness.js';
import { RecordingLink } from '../support/recording-link.js';

const ID = 7n;
const BOOM = new Error('target reset');

/** What happens to the connection, in order. */
type Step =
  | 'peer CLOSE_WRITE' // peerEndsWrite()
  | 'peer final' // peerEnds(): CLOSE_REQ at the agent, CLOSE_RSP at the server
  | 'our end' // localEnds(): the reader's end(), the socket's EOF
  | 'close' // close(null): the connection is over, cleanly
  | 'close with error'; // close(err): a failure

interface Row {
  name: string;
  role: CloseRole;
  opts?: ConnCoreOptions;
  steps: Step[];
  /** Control packets the link carried, in order. */
  sent: KnownPacket[];
  peer: PeerState;
  local: LocalState;
  /** What localEnds() returned (the peer's direction ends with ours), if it ran. */
  peerEndsWithOurs?: boolean;
}

const rsp = (error = ''): KnownPacket => ({ type: 'CLOSE_RSP', connectID: ID, error });
const req = (error?: string): KnownPacket => (error === undefined ? { type: 'CLOSE_REQ', connectID: ID } : { type: 'CLOSE_REQ', connectID: ID, error });
const closeWrite: KnownPacket = { type: 'CLOSE_WRITE', connectID: ID };
const HALF = { halfClose: true };

const rows: Row[] = [
  // The agent's side: one CLOSE_RSP however the connection ends.
  {
    name: 'agent: the server closes first, we answer',
    role: AGENT_CLOSE,
    steps: ['peer final', 'close'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
  },
  {
    name: 'agent: the target ends first; our CLOSE_RSP awaits no answer',
    role: AGENT_CLOSE,
    steps: ['our end'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.FINAL_SENT,
    peerEndsWithOurs: true,
  },
  {
    name: 'agent: the target ends after the server did: no second CLOSE_RSP',
    role: AGENT_CLOSE,
    steps: ['peer final', 'our end', 'close'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: 'agent: a failure carries its text',
    role: AGENT_CLOSE,
    steps: ['close with error'],
    sent: [rsp(BOOM.message)],
    peer: PeerState.OPEN,
    local: LocalState.CLOSED,
  },
  {
    name: 'agent: a failure after the server closed answers without it',
    role: AGENT_CLOSE,
    steps: ['peer final', 'close with error'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
  },
  {
    name: 'agent: close twice, then our end: one CLOSE_RSP',
    role: AGENT_CLOSE,
    steps: ['close', 'close with error', 'our end'],
    sent: [rsp()],
    peer: PeerState.OPEN,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },

  // The server's side: CLOSE_REQ when it ends first, nothing when the agent did.
  {
    name: 'server: our end opens the close and waits for CLOSE_RSP',
    role: SERVER_CLOSE,
    steps: ['our end'],
    sent: [req()],
    peer: PeerState.OPEN,
    local: LocalState.FINAL_SENT,
    peerEndsWithOurs: false,
  },
  {
    name: 'server: the agent answers; nothing more is sent',
    role: SERVER_CLOSE,
    steps: ['our end', 'peer final', 'close'],
    sent: [req()],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: 'server: the agent closes first: nothing is owed',
    role: SERVER_CLOSE,
    steps: ['peer final', 'close'],
    sent: [],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
  },
  {
    name: 'server: a failure to an agent that does not read errors: a plain CLOSE_REQ',
    role: SERVER_CLOSE,
    steps: ['close with error'],
    sent: [req()],
    peer: PeerState.OPEN,
    local: LocalState.CLOSED,
  },
  {
    name: 'server: a failure to an agent that reads errors carries its text',
    role: SERVER_CLOSE_WITH_ERROR,
    steps: ['close with error'],
    sent: [req(BOOM.message)],
    peer: PeerState.OPEN,
    local: LocalState.CLOSED,
  },
  {
    name: 'server: a failure after the agent closed sends nothing',
    role: SERVER_CLOSE_WITH_ERROR,
    steps: ['peer final', 'close with error'],
    sent: [],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
  },

  // Half-close (negotiated): each end's CLOSE_WRITE, then the final packets.
  {
    name: 'half-close: our end is CLOSE_WRITE; we still read',
    role: SERVER_CLOSE_WITH_ERROR,
    opts: HALF,
    steps: ['our end'],
    sent: [closeWrite],
    peer: PeerState.OPEN,
    local: LocalState.WRITE_ENDED,
    peerEndsWithOurs: false,
  },
  {
    name: 'half-close, server: both CLOSE_WRITEs, then the close answers (nothing sent)',
    role: SERVER_CLOSE_WITH_ERROR,
    opts: HALF,
    steps: ['our end', 'peer CLOSE_WRITE', 'close'],
    sent: [closeWrite],
    peer: PeerState.WRITE_ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: 'half-close, agent: both CLOSE_WRITEs, then CLOSE_RSP',
    role: AGENT_CLOSE,
    opts: HALF,
    steps: ['our end', 'peer CLOSE_WRITE', 'close'],
    sent: [closeWrite, rsp()],
    peer: PeerState.WRITE_ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: 'half-close, agent: both CLOSE_WRITEs, then a failure still carries its text',
    role: AGENT_CLOSE,
    opts: HALF,
    steps: ['our end', 'peer CLOSE_WRITE', 'close with error'],
    sent: [closeWrite, rsp(BOOM.message)],
    peer: PeerState.WRITE_ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: "half-close: after the peer's CLOSE_WRITE, our end is the final packet, not a CLOSE_WRITE",
    role: SERVER_CLOSE_WITH_ERROR,
    opts: HALF,
    steps: ['peer CLOSE_WRITE', 'our end'],
    sent: [req()],
    peer: PeerState.WRITE_ENDED,
    local: LocalState.FINAL_SENT,
    peerEndsWithOurs: false,
  },
  {
    name: "half-close, agent: after the server's CLOSE_WRITE, our end is CLOSE_RSP and ends the peer's side",
    role: AGENT_CLOSE,
    opts: HALF,
    steps: ['peer CLOSE_WRITE', 'our end'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.FINAL_SENT,
    peerEndsWithOurs: true,
  },
  {
    name: 'half-close: a second CLOSE_WRITE changes nothing',
    role: AGENT_CLOSE,
    opts: HALF,
    steps: ['peer CLOSE_WRITE', 'peer CLOSE_WRITE'],
    sent: [],
    peer: PeerState.WRITE_ENDED,
    local: LocalState.OPEN,
  },
  {
    name: 'without half-close a CLOSE_WRITE is ignored',
    role: AGENT_CLOSE,
    steps: ['peer CLOSE_WRITE'],
    sent: [],
    peer: PeerState.OPEN,
    local: LocalState.OPEN,
  },
  {
    name: 'a CLOSE_WRITE after the peer ended is ignored',
    role: AGENT_CLOSE,
    opts: HALF,
    steps: ['peer final', 'peer CLOSE_WRITE'],
    sent: [],
    peer: PeerState.ENDED,
    local: LocalState.OPEN,
  },

  // Linger (no half-close, upstream agents): our end waits for the agent's answer.
  {
    name: 'linger: our end sends nothing yet',
    role: SERVER_CLOSE,
    opts: { lingerAfterEndMs: 60_000 },
    steps: ['our end'],
    sent: [],
    peer: PeerState.OPEN,
    local: LocalState.LINGERING,
    peerEndsWithOurs: false,
  },
  {
    name: 'linger: the agent closes meanwhile; nothing is owed',
    role: SERVER_CLOSE,
    opts: { lingerAfterEndMs: 60_000 },
    steps: ['our end', 'peer final', 'close'],
    sent: [],
    peer: PeerState.ENDED,
    local: LocalState.CLOSED,
    peerEndsWithOurs: false,
  },
  {
    name: 'linger is off with half-close',
    role: SERVER_CLOSE,
    opts: { lingerAfterEndMs: 60_000, halfClose: true },
    steps: ['our end'],
    sent: [closeWrite],
    peer: PeerState.OPEN,
    local: LocalState.WRITE_ENDED,
    peerEndsWithOurs: false,
  },
  {
    name: 'linger: after the agent closed, our end is final at once',
    role: AGENT_CLOSE,
    opts: { lingerAfterEndMs: 60_000 },
    steps: ['peer final', 'our end'],
    sent: [rsp()],
    peer: PeerState.ENDED,
    local: LocalState.FINAL_SENT,
    peerEndsWithOurs: false,
  },
];

/** A core on a recording link, with the owner's destroy() recorded. */
function core(
  role: CloseRole,
  opts: ConnCoreOptions = {},
  link = new RecordingLink(),
): { core: ConnCore; link: RecordingLink; destroyed: Array<Error | undefined> } {
  const destroyed: Array<Error | undefined> = [];
  const owner = { waitingBytes: 42, destroy: (err?: Error) => void destroyed.push(err) };
  return { core: new ConnCore(link, ID, role, owner, opts), link, destroyed };
}

for (const row of rows) {
  test(`core: ${row.name}`, () => {
    const { core: c, link, destroyed } = core(row.role, row.opts);
    let endedWithOurs: boolean | undefined;
    for (const step of row.steps) {
      if (step === 'peer CLOSE_WRITE') c.peerEndsWrite();
      else if (step === 'peer final') c.peerEnds();
      else if (step === 'our end') endedWithOurs = c.localEnds();
      else if (step === 'close') c.close(null);
      else c.close(BOOM);
    }
    assert.deepEqual(link.control, row.sent);
    assert.deepEqual({ peer: c.peer, local: c.local }, { peer: row.peer, local: row.local });
    assert.equal(endedWithOurs, row.peerEndsWithOurs);
    assert.deepEqual(destroyed, []);
    c.close(null); // its timers, if any
  });
}

// ---------------------------------------------------------------- timers and flow

test('core: the close timer ends a connection whose peer never answers, with ConnectionClosedError', async (t) => {
  harness(t);
  const { core: c, destroyed } = core(SERVER_CLOSE, { closeTimeoutMs: 20 });
  c.localEnds();
  await sleep(60);
  assert.equal(destroyed.length, 1);
  assert.ok(destroyed[0] instanceof ConnectionClosedError);
  assert.equal(destroyed[0].message, 'connection 7 did not finish closing within 20 ms; dropped');
  c.close(destroyed[0]);
});

test('core: the close timer waits while the link is suspended, then ends the connection', async (t) => {
  harness(t);
  const link = Object.assign(new RecordingLink(), { suspended: true });
  const { core: c, destroyed } = core(SERVER_CLOSE, { closeTimeoutMs: 20 }, link);
  c.localEnds();
  await sleep(70);
  assert.deepEqual(destroyed, []);
  link.suspended = false;
  await sleep(50);
  assert.equal(destroyed.length, 1);
  c.close(null);
});

test('core: the linger ends a connection whose peer goes quiet, cleanly; DATA starts it over', async (t) => {
  harness(t);
  // Wide margins (DATA every 50 ms against a 300 ms linger): a loaded CI machine once took over 40 ms for a 20 ms sleep.
  const { core: c, destroyed } = core(SERVER_CLOSE, { lingerAfterEndMs: 300 });
  c.localEnds();
  for (let i = 0; i < 8; i++) {
    await sleep(50);
    c.received();
  }
  assert.deepEqual(destroyed, [], 'each DATA started the linger over');
  await sleep(700);
  assert.deepEqual(destroyed, [undefined]);
  c.close(null);
});

test('core: the linger waits while the link is suspended', async (t) => {
  harness(t);
  const link = Object.assign(new RecordingLink(), { suspended: true });
  const { core: c, destroyed } = core(SERVER_CLOSE, { lingerAfterEndMs: 20 }, link);
  c.localEnds();
  await sleep(70);
  assert.deepEqual(destroyed, []);
  link.suspended = false;
  await sleep(50);
  assert.deepEqual(destroyed, [undefined]);
  c.close(null);
});

test('core: holding the link pauses it once, and the stall limit ends the connection (ConnectionStalledError)', async (t) => {
  harness(t);
  const { core: c, link, destroyed } = core(AGENT_CLOSE, { stallTimeoutMs: 20 });
  c.holdLink();
  c.holdLink();
  assert.equal(link.pauses, 1);
  await sleep(60);
  assert.equal(destroyed.length, 1);
  assert.ok(destroyed[0] instanceof ConnectionStalledError);
  assert.match(destroyed[0].message, /^connection 7: its reader took nothing for 20 ms while 42 bytes waited/);
  c.close(destroyed[0]);
  assert.equal(link.resumes, 1, 'the close releases the link, once');
});

test('core: with flow control the stall limit is off, and releasing the link twice resumes it once', async (t) => {
  harness(t);
  const { core: c, link, destroyed } = core(AGENT_CLOSE, { stallTimeoutMs: 10, flow: { sendWindow: 10, receiveWindow: 64 * 1024 } });
  c.holdLink();
  await sleep(40);
  assert.deepEqual(destroyed, []);
  c.releaseLink();
  c.releaseLink();
  assert.deepEqual([link.pauses, link.resumes], [1, 1]);
  c.close(null);
});

test("core: credit: at most the peer's window is taken; grants add to it; without flow control it is unbounded and grants are ignored", () => {
  const { core: flow } = core(AGENT_CLOSE, { flow: { sendWindow: 10, receiveWindow: 64 * 1024 } });
  assert.equal(flow.takeCredit(6), 6);
  assert.equal(flow.takeCredit(6), 4);
  assert.equal(flow.takeCredit(6), 0);
  assert.equal(flow.grantCredit(0), false);
  assert.equal(flow.grantCredit(-5), false);
  assert.equal(flow.grantCredit(3), true);
  assert.equal(flow.takeCredit(6), 3);
  const { core: none } = core(AGENT_CLOSE);
  assert.equal(none.takeCredit(1024 * 1024), 1024 * 1024);
  assert.equal(none.grantCredit(5), false);
  flow.close(null);
  none.close(null);
});

test('core: consumption is granted back as WINDOW_UPDATE, but not once the peer has ended', () => {
  const { core: c, link } = core(AGENT_CLOSE, { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 } });
  c.grant(64 * 1024, false);
  const updates = link.ofType('WINDOW_UPDATE');
  assert.equal(updates.length, 1);
  c.peerEnds();
  c.grant(128 * 1024, false);
  assert.equal(link.ofType('WINDOW_UPDATE').length, 1);
  c.close(null);
});

test('core: sendsNoMore once the peer ended or our final packet went', () => {
  const a = core(AGENT_CLOSE).core;
  assert.equal(a.sendsNoMore, false);
  a.peerEnds();
  assert.equal(a.sendsNoMore, true);
  const b = core(SERVER_CLOSE).core;
  b.localEnds();
  assert.equal(b.sendsNoMore, true);
  a.close(null);
  b.close(null);
});
