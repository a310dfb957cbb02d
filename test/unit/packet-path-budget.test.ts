// What one packet may cost on the data path, counted, never timed: Buffer
// allocations, HTTP/2 DATA frames, transport writes and bytes copied, for the
// agent's and the server's packet calls joined by real node:http2 sessions on
// an in-memory transport (test/support/memory-link.ts). The bounds are what
// the path does today, so a change that adds a copy or doubles the garbage
// per packet fails here, not in a benchmark nobody reran. The transport hands
// bytes on in pieces of its own (as TLS records do), so a few messages are cut
// and joined whatever the sender does: budgets allow 2 % of them.
// (The CPU these cost was measured with bench/packet-path.ts, a one-off tool
// since removed: it is in git.)

import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Packet } from '../../pkg/protocol/packet.js';
import { countBufferAllocations } from '../support/buffer-allocations.js';
import { memoryLinkPair, sendWithBackPressure, type MemoryLinkPair } from '../support/memory-link.js';

const KiB = 1024;

/** Messages the in-memory transport may cut on its own (it delivers in pieces, as TLS records do). */
const CUT_BY_TRANSPORT = (n: number): number => Math.ceil(n / 50) + 2;

/** Runs `send` on the pair, resolves when `count` packets arrived at the far end. */
function exchange(pair: MemoryLinkPair, to: 'server' | 'agent', count: number, send: (i: number) => void): Promise<Packet[]> {
  return new Promise((resolve) => {
    const got: Packet[] = [];
    const on = (p: Packet): void => {
      got.push(p);
      if (got.length === count) resolve(got);
    };
    if (to === 'server') pair.onServerPacket(on);
    else pair.onAgentPacket(on);
    for (let i = 0; i < count; i++) send(i);
  });
}

test('a small DATA packet is one allocation, one HTTP/2 frame, and arrives without a copy', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const N = 1000;
  const payload = Buffer.alloc(100, 1);
  const frames0 = pair.agentTransport.dataFrames;
  let got: Packet[] = [];
  const allocations = await countBufferAllocations(async () => {
    got = await exchange(pair, 'server', N, () => pair.agent.sendData(3n, payload, () => {}));
  });
  assert.equal(got.length, N);
  assert.ok(got.every((p) => p.type === 'DATA' && p.data.equals(payload)));
  const frames = pair.agentTransport.dataFrames - frames0;
  assert.ok(frames <= N, `${frames / N} HTTP/2 DATA frames per packet (budget 1)`);
  const joined = pair.server.joined.messages;
  assert.ok(joined <= CUT_BY_TRANSPORT(N), `${joined} of ${N} messages arrived cut and were joined (budget ${CUT_BY_TRANSPORT(N)})`);
  // The framed message on the way out; on the way in, a buffer per joined message only.
  assert.ok(allocations <= N + joined, `${allocations / N} Buffer allocations per packet (budget 1 + joins)`);
});

test('a 16 KiB DATA payload still leaves as one frame per packet', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const N = 200;
  const payload = Buffer.alloc(16 * KiB - 64, 2);
  const frames0 = pair.agentTransport.dataFrames;
  await exchange(pair, 'server', N, () => pair.agent.sendData(3n, payload, () => {}));
  const frames = pair.agentTransport.dataFrames - frames0;
  assert.ok(frames <= N, `${frames / N} HTTP/2 DATA frames per packet (budget 1)`);
});

test('a control packet is one allocation and one frame', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const N = 1000;
  const frames0 = pair.serverTransport.dataFrames;
  let got: Packet[] = [];
  const allocations = await countBufferAllocations(async () => {
    got = await exchange(pair, 'agent', N, (i) =>
      pair.server.sendControl({ type: 'DIAL_REQ', protocol: 'tcp', address: '127.0.0.1:10250', random: BigInt(i + 1) }),
    );
  });
  assert.ok(got.every((p, i) => p.type === 'DIAL_REQ' && p.random === BigInt(i + 1)));
  const joined = pair.agent.joined.messages;
  assert.ok(joined <= CUT_BY_TRANSPORT(N), `${joined} of ${N} control packets arrived cut and were joined`);
  assert.ok(allocations <= N + joined, `${allocations / N} Buffer allocations per control packet (budget 1 + joins)`);
  const frames = pair.serverTransport.dataFrames - frames0;
  assert.ok(frames <= N, `${frames / N} HTTP/2 DATA frames per control packet (budget 1)`);
});

test('bulk: a 64 KiB payload is not copied on the way out and joined once on the way in', async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  const N = 256; // 16 MiB
  const payload = Buffer.alloc(64 * KiB, 3);
  const frames0 = pair.agentTransport.dataFrames;
  const writes0 = pair.agentTransport.writes;
  let got: Packet[] = [];
  const allocations = await countBufferAllocations(async () => {
    got = await new Promise<Packet[]>((resolve) => {
      const all: Packet[] = [];
      pair.onServerPacket((p) => {
        all.push(p);
        if (all.length === N) resolve(all);
      });
      sendWithBackPressure(pair.agent, 5n, payload, N);
    });
  });
  assert.ok(got.every((p) => p.type === 'DATA' && p.data.length === payload.length));
  // One small header per packet on the way out (the payload is written as it is), one join buffer on the way in.
  assert.ok(allocations <= 2 * N, `${allocations / N} Buffer allocations per 64 KiB (budget 2)`);
  // Node sends at most 16 KiB per frame: four frames of payload, one for the header.
  const frames = pair.agentTransport.dataFrames - frames0;
  assert.ok(frames <= 5 * N, `${frames / N} HTTP/2 DATA frames per 64 KiB (budget 5)`);
  const writes = pair.agentTransport.writes - writes0;
  assert.ok(writes <= N, `${writes / N} transport writes per 64 KiB (budget 1)`);
  // Each message spans frames: joined once, whole, and no more.
  const joined = pair.server.joined;
  assert.ok(joined.messages <= N, `${joined.messages / N} joins per 64 KiB message (budget 1)`);
  assert.ok(joined.bytes <= N * (payload.length + 16), `${joined.bytes / N} bytes copied per 64 KiB message (budget: one copy)`);
});
