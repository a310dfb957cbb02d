// Connections sharing one agent link share its send buffer fairly: four bulk
// writers on the agent's packet call (real node:http2 sessions on an in-memory
// transport, test/support/memory-link.ts), and the bytes each has delivered at
// the server, compared by count at checkpoints while all four still send.
// Nothing is timed. Without turns (pkg/grpc/packet-stream.ts) the writer
// released first after each drain refilled the whole buffer before the others
// got a piece in.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { memoryLinkPair, sendWithBackPressure } from '../support/memory-link.js';

const KiB = 1024;
const MiB = 1024 * KiB;
/** Bytes delivered before fairness is judged: the first writer starts alone, and the link learns there are four. */
const START = 4 * MiB;

test('four bulk writers on one link each get a fair share of it while all four send', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const flows = [11n, 12n, 13n, 14n];
  const piece = Buffer.alloc(64 * KiB, 7);
  const perFlow = 16 * MiB;
  const received = new Map<bigint, number>(flows.map((id) => [id, 0]));
  /** Each flow's share of the bytes delivered, at each checkpoint. */
  const checkpoints: Array<{ total: number; shares: number[] }> = [];
  /** Each flow's bytes when the start (the first writer alone on the link for a moment) is past. */
  let base: number[] | undefined;
  const allDone = new Promise<void>((resolve) => {
    let total = 0;
    let next = START + MiB;
    pair.onServerPacket((p) => {
      if (p.type !== 'DATA') return;
      received.set(p.connectID, received.get(p.connectID)! + p.data.length);
      total += p.data.length;
      const got = flows.map((id) => received.get(id)!);
      if (base === undefined && total >= START) base = got;
      // Judged while all four run: until the first flow has delivered everything.
      if (base !== undefined && total >= next && got.every((g) => g < perFlow)) {
        const since = got.map((g, i) => g - base![i]!);
        const fair = since.reduce((a, b) => a + b, 0) / flows.length;
        checkpoints.push({ total, shares: since.map((g) => g / fair) });
        next += MiB;
      }
      if (total === perFlow * flows.length) resolve();
    });
  });
  for (const id of flows) sendWithBackPressure(pair.agent, id, piece, perFlow / piece.length);
  await allDone;

  for (const { total, shares } of checkpoints) {
    const pct = shares.map((s) => Math.round(s * 100));
    assert.ok(
      shares.every((s) => s >= 0.8 && s <= 1.2),
      `at ${(total / MiB).toFixed(1)} MiB delivered the flows had ${pct.join(', ')} % of a fair share since ${START / MiB} MiB (bound 80–120 %)`,
    );
  }
  // The first flow finished too soon for fairness to be judged much at all.
  assert.ok(checkpoints.length >= 32, `only ${checkpoints.length} checkpoints while all four flows sent`);
});
