// Connections sharing one agent link share its send buffer fairly: four bulk
// writers on the agent's packet call (real node:http2 sessions on an in-memory
// transport, test/support/memory-link.ts), and four agent relays reading real
// loopback targets over a real loopback link; the bytes each has delivered at
// the server, compared by count at checkpoints while all four still send.
// Nothing is timed. Without turns (pkg/grpc/packet-stream.ts) the writer
// released first after each drain refilled the whole buffer before the others
// got a piece in.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import { CONN_SEND_HIGH_WATER_MARK } from '../../pkg/agent/link-connections.js';
import { PooledReads } from '../../pkg/mux/pooled-reads.js';
import type { Packet } from '../../pkg/protocol/packet.js';
import { harness } from '../support/harness.js';
import { memoryLinkPair, sendWithBackPressure, tcpLinkPair } from '../support/memory-link.js';

const KiB = 1024;
const MiB = 1024 * KiB;
/** Bytes delivered before fairness is judged: the first writer starts alone, and the link learns there are four. */
const START = 4 * MiB;

/** When fairnessJudge looks: from `start` bytes delivered on, first `firstAfter` bytes past it, then every `every` bytes. */
interface Judging {
  start: number;
  firstAfter: number;
  every: number;
}

test('four bulk writers on one link each get a fair share of it while all four send', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const flows = [11n, 12n, 13n, 14n];
  const piece = Buffer.alloc(64 * KiB, 7);
  const perFlow = 16 * MiB;
  const judge = fairnessJudge(flows, perFlow, { start: START, firstAfter: MiB, every: MiB });
  let total = 0;
  const allDone = new Promise<void>((resolve) => {
    pair.onServerPacket((p) => {
      judge.onPacket(p);
      if (p.type === 'DATA') total += p.data.length;
      if (total === perFlow * flows.length) resolve();
    });
  });
  for (const id of flows) sendWithBackPressure(pair.agent, id, piece, perFlow / piece.length);
  await allDone;
  assertFair(judge.checkpoints, 32);
});

/** Follows DATA at the server and, as `judging` says, each flow's share of the bytes delivered since its start, until the first flow has delivered `perFlow`. */
function fairnessJudge(flows: readonly bigint[], perFlow: number, judging: Judging): { onPacket(p: Packet): void; checkpoints: Checkpoint[] } {
  const received = new Map<bigint, number>(flows.map((id) => [id, 0]));
  const checkpoints: Checkpoint[] = [];
  let base: number[] | undefined;
  let total = 0;
  let next = judging.start + judging.firstAfter;
  return {
    checkpoints,
    onPacket(p) {
      if (p.type !== 'DATA' || !received.has(p.connectID)) return;
      received.set(p.connectID, received.get(p.connectID)! + p.data.length);
      total += p.data.length;
      const got = flows.map((id) => received.get(id)!);
      if (base === undefined && total >= judging.start) base = got;
      // Judged while all four run: until the first flow has delivered everything.
      if (base !== undefined && total >= next && got.every((g) => g < perFlow)) {
        const since = got.map((g, i) => g - base![i]!);
        const fair = since.reduce((a, b) => a + b, 0) / flows.length;
        checkpoints.push({ total, since: judging.start, shares: since.map((g) => g / fair) });
        next += judging.every;
      }
    },
  };
}

interface Checkpoint {
  /** Bytes delivered, all flows. */
  total: number;
  /** Where the shares are counted from (bytes delivered, all flows). */
  since: number;
  /** Each flow's bytes since then, as a fraction of an equal share. */
  shares: number[];
}

function assertFair(checkpoints: readonly Checkpoint[], atLeast: number): void {
  for (const { total, since, shares } of checkpoints) {
    const pct = shares.map((s) => Math.round(s * 100));
    assert.ok(
      shares.every((s) => s >= 0.8 && s <= 1.2),
      `at ${(total / MiB).toFixed(1)} MiB delivered the flows had ${pct.join(', ')} % of a fair share since ${since / MiB} MiB (bound 80–120 %)`,
    );
  }
  // The first flow finished too soon for fairness to be judged much at all.
  assert.ok(checkpoints.length >= atLeast, `only ${checkpoints.length} checkpoints while all four flows sent`);
}

// The agent's case (bench "four flows"): each relay reads its target into
// pooled slabs and holds two reads; released after a turn, it hands the link
// what it holds and resumes its socket, whose next reads come on the next poll
// in the order the sockets were resumed. The relay read last each turn found
// the buffer full after one piece (the turn's count was also reset by an
// empty turn end right after each drain) and, being released last, was read
// last again: one flow at 55–80 % of its share for the whole transfer.
test('four relays reading bulk targets on one link each get a fair share of it', async (t) => {
  const h = harness(t);
  const pair = await tcpLinkPair();
  h.defer(() => pair.close());
  const perFlow = 48 * MiB;
  const chunk = Buffer.alloc(MiB, 0x5a);
  // The targets: each sends perFlow bytes once asked, in 1 MiB writes with back-pressure (as bench/target.ts).
  const target = createServer((socket) => {
    socket.on('error', () => {});
    socket.once('data', () => {
      let left = perFlow;
      const pump = (): void => {
        while (left > 0) {
          left -= chunk.length;
          if (!socket.write(chunk)) {
            socket.once('drain', pump);
            return;
          }
        }
        socket.end();
      };
      pump();
    });
  });
  target.listen(0, '127.0.0.1');
  await once(target, 'listening');
  h.defer(() => new Promise<void>((resolve) => target.close(() => resolve())));
  const port = (target.address() as { port: number }).port;

  const flows = [21n, 22n, 23n, 24n];
  // Judged over spans of several MiB: a turn's pieces arrive flow after flow
  // (a share counted over one MiB may be off by a piece, 25 %), and on a busy
  // machine a target's next write may come late in the first MiB.
  const judge = fairnessJudge(flows, perFlow, { start: 8 * MiB, firstAfter: 8 * MiB, every: 2 * MiB });
  const closes: Array<Promise<Error | undefined>> = [];
  let closed = 0;
  const allClosed = new Promise<void>((resolve) =>
    pair.onServerPacket((p) => {
      judge.onPacket(p);
      if (p.type === 'CLOSE_RSP' && ++closed === flows.length) resolve();
    }),
  );
  const sockets: Socket[] = [];
  for (const id of flows) {
    const reads = new PooledReads();
    const socket = connect({ host: '127.0.0.1', port, noDelay: true, allowHalfOpen: true, onread: reads.onread });
    reads.bind(socket);
    h.defer(() => socket.destroy());
    await once(socket, 'connect');
    const relay = new EndpointConn(pair.agent, id, `127.0.0.1:${port}`, { sendHighWaterMark: CONN_SEND_HIGH_WATER_MARK });
    h.defer(() => relay.destroy());
    closes.push(new Promise((resolve) => (relay.onClose = resolve)));
    relay.attach(socket, [], reads);
    sockets.push(socket);
  }
  for (const socket of sockets) socket.write('B');
  await allClosed;
  for (const err of await Promise.all(closes)) assert.equal(err, undefined);

  assertFair(judge.checkpoints, 32);
});
