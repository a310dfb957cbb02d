// What the agent's bulk send path allocates, counted, never timed: a target
// dialled by the agent's Dialer streams into an EndpointConn whose link is a
// real agent packet call (test/support/memory-link.ts). Reads land in pooled
// slabs (pkg/mux/pooled-reads.ts), so once the pool is warm a MiB read from
// the target costs no new read buffer; a change that brings back a buffer per
// read (about 16 per MiB) fails here, not in a benchmark nobody reran.
// (The CPU and the GC it saves are in npm run bench -- --only ours,ours-noresume.)

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { AllowList } from '../../pkg/agent/allow-list.js';
import { Dialer } from '../../pkg/agent/dialer.js';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import { isPooled, targetReadPool } from '../../pkg/mux/buffer-pool.js';
import type { PacketLink } from '../../pkg/mux/packet-link.js';
import { countBufferAllocations } from '../support/buffer-allocations.js';
import { memoryLinkPair, type MemoryLinkPair } from '../support/memory-link.js';

const MiB = 1024 * 1024;

/** Streams `bytes` from a fresh loopback target through a new EndpointConn; resolves with what was new per read. */
async function streamFromTarget(pair: MemoryLinkPair, connectID: bigint, bytes: number): Promise<{ foreignStores: number; slabsAllocated: number }> {
  const payload = Buffer.alloc(bytes, 0x42);
  const target = createServer((s) => s.end(payload));
  target.listen(0, '127.0.0.1');
  await once(target, 'listening');
  try {
    const { socket, reads } = await new Dialer({ allowList: AllowList.parse('127.0.0.1') }).dial(`127.0.0.1:${(target.address() as AddressInfo).port}`);
    // The backing memory of every payload the link is handed that is not a pooled slab: one per read without the pool.
    const foreign = new Set<ArrayBufferLike>();
    const agent = pair.agent;
    const link: PacketLink = {
      sendData: (id, data, cb) => {
        if (!isPooled(data)) foreign.add(data.buffer);
        agent.sendData(id, data, cb);
      },
      sendControl: (p) => agent.sendControl(p),
      pauseReceive: (h) => agent.pauseReceive(h),
      resumeReceive: (h) => agent.resumeReceive(h),
    };
    let received = 0;
    const arrived = new Promise<void>((resolve) => {
      pair.onServerPacket((p) => {
        if (p.type === 'DATA' && p.connectID === connectID) received += p.data.length;
        if (received === bytes) resolve();
      });
    });
    const slabs0 = targetReadPool.allocated;
    const conn = new EndpointConn(link, connectID, 'target');
    conn.attach(socket, [], reads);
    await arrived;
    conn.destroy();
    return { foreignStores: foreign.size, slabsAllocated: targetReadPool.allocated - slabs0 };
  } finally {
    target.close();
  }
}

test("the agent's bulk reads from its target allocate no buffer per read once the pool is warm", async (t) => {
  const pair = await memoryLinkPair();
  t.after(() => pair.close());
  // Warms the pool (and V8) on a first connection.
  await streamFromTarget(pair, 1n, 16 * MiB);
  const SIZE = 32 * MiB;
  let counted = { foreignStores: 0, slabsAllocated: 0 };
  const factoryAllocations = await countBufferAllocations(async () => {
    counted = await streamFromTarget(pair, 2n, SIZE);
  });
  const perMiB = (n: number): number => n / (SIZE / MiB);
  // A read that did not fill half a slab is copied out of the shared landing buffer: a few per transfer.
  assert.ok(perMiB(counted.foreignStores) <= 0.25, `${perMiB(counted.foreignStores)} read buffers not from the pool per MiB (budget 0.25)`);
  assert.ok(counted.slabsAllocated <= 8, `${counted.slabsAllocated} slabs allocated anew on a warm pool for ${SIZE / MiB} MiB (budget 8)`);
  // Through the public factories: the packet header on the way out, the join on the way in, one each per 64 KiB DATA.
  assert.ok(perMiB(factoryAllocations) <= 2 * 16 + 2, `${perMiB(factoryAllocations)} Buffer allocations per MiB (budget 34)`);
});
