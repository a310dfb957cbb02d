// What one tunnelled connection may cost, counted, never timed: a CONNECT
// through an in-process server and agent to a target that echoes one byte and
// closes, with the whole close handshake, counted by async resource type
// (timers, promises, nextTicks, socket writes and shutdowns), plus the
// AbortControllers and stream pipes it makes. Client and target run in this
// process too; their share is constant, so a change that adds a timer, a
// promise chain or a stream per connection on the server or agent fails here,
// not in a benchmark nobody reran. The bounds are what the path does today
// with a little room, measured after a few connections have warmed it up.

import assert from 'node:assert/strict';
import { createHook } from 'node:async_hooks';
import { once } from 'node:events';
import type { Socket } from 'node:net';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { connectVia, startTCPServer, startTunnel, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 120_000 };
const CONNECTIONS = 100;
const BATCHES = 3;

/**
 * Per connection, at most (async resources by type, and the two counted by
 * hand). Today: 4 timers (the proxier's head deadline, the pending dial's, the
 * agent's connect deadline, the server's close timer while the handshake
 * runs), 23–24 promises (a little more on a loaded machine) and 42 nextTicks (most of both are the test client's;
 * ~28 promises when the proxier awaited its dial and the agent's dialer was async;
 * 43 ticks while the proxier paused its client once dialed and the relay resumed it),
 * 14 socket writes, 3 shutdowns (the client's, the server's half-close to it,
 * the target's), 2 immediates (the agent builds the connection and makes its
 * next target socket after DIAL_RSP is out), 2 AbortControllers (one per
 * dial on each side: AbortSignal is the one way to cancel a dial since the
 * connection core landed, issue 36; the hand-made Cancel it replaced saved
 * ~5% of a new connection's CPU, measured on Node 20.20), no pipe.
 * (While the agent shut its target down on CLOSE_REQ and waited for that:
 * 5 timers, 4 shutdowns.) (With a Duplex
 * and splice() per side and an AbortController per dial: 6 timers, 56 ticks,
 * 2 AbortControllers and 4 pipes.) The half-timer of room absorbs the
 * tunnel's own periodic timers, and the half-AbortController the agent's
 * sync loop, which makes one per pause between its syncs (client-set.ts),
 * whatever the connections do.
 */
const BUDGET: Record<string, number> = {
  Timeout: 4.5,
  PROMISE: 25,
  TickObject: 42.5,
  WRITEWRAP: 14.5,
  SHUTDOWNWRAP: 3,
  Immediate: 2,
  AbortController: 2.5,
  pipe: 0,
};

interface Counts {
  byType: Map<string, number>;
  abortControllers: number;
  pipes: number;
}

/** Counts what `run` creates: async resources by type, AbortControllers and Readable.pipe() calls. */
async function count(run: () => Promise<void>): Promise<Counts> {
  const byType = new Map<string, number>();
  const hook = createHook({
    init(_id, type) {
      byType.set(type, (byType.get(type) ?? 0) + 1);
    },
  });
  const counts: Counts = { byType, abortControllers: 0, pipes: 0 };
  const OriginalAbortController = globalThis.AbortController;
  globalThis.AbortController = class extends OriginalAbortController {
    constructor() {
      super();
      counts.abortControllers++;
    }
  };
  // The very method, unbound, so that the finally below puts back what was there; the wrapper calls it on its stream.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const originalPipe = Readable.prototype.pipe;
  Readable.prototype.pipe = function pipe<T extends NodeJS.WritableStream>(this: Readable, dest: T, opts?: { end?: boolean }): T {
    counts.pipes++;
    return originalPipe.call(this, dest, opts) as T;
  };
  hook.enable();
  try {
    await run();
  } finally {
    hook.disable();
    globalThis.AbortController = OriginalAbortController;
    Readable.prototype.pipe = originalPipe;
  }
  return counts;
}

test(
  'a connection through the tunnel, target closing, stays within its budget of timers, promises, ticks, writes, AbortControllers and pipes',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const { server, agent } = await startTunnel(h);
    // Echoes the first chunk and closes (no pipe, so that only the tunnel's are counted).
    const target = await startTCPServer(h, (s: Socket) => {
      s.once('data', (chunk: Buffer) => s.end(chunk));
      s.on('error', () => {});
    });
    const address = `127.0.0.1:${target.port}`;
    const oneConnection = async (): Promise<void> => {
      const { socket, status } = await connectVia(server.udsPath, address);
      assert.equal(status, 200);
      socket.resume();
      socket.write('x');
      await once(socket, 'close');
    };
    const settled = (): Promise<void> =>
      waitFor('every connection closed on both sides', () => server.tunnel.establishedCount() === 0 && agent.clients.connCount === 0);
    for (let i = 0; i < 10; i++) await oneConnection();
    await settled();

    // The least of a few batches: on a loaded machine reads arrive split more often, and each extra chunk costs the
    // test client's reading loop promises and ticks that are not the tunnel's. A cost the tunnel adds is in every batch.
    const perConnection: Record<string, number> = {};
    for (let batch = 0; batch < BATCHES; batch++) {
      const counts = await count(async () => {
        for (let i = 0; i < CONNECTIONS; i++) await oneConnection();
        await settled();
      });
      const thisBatch: Record<string, number> = {
        AbortController: counts.abortControllers / CONNECTIONS,
        pipe: counts.pipes / CONNECTIONS,
      };
      for (const [type, n] of counts.byType) thisBatch[type] = n / CONNECTIONS;
      t.diagnostic(`batch ${batch + 1}, per connection: ${JSON.stringify(thisBatch)}`);
      for (const [type, n] of Object.entries(thisBatch)) perConnection[type] = Math.min(perConnection[type] ?? Infinity, n);
    }
    for (const [type, budget] of Object.entries(BUDGET)) {
      const used = perConnection[type] ?? 0;
      assert.ok(used <= budget, `${used} ${type} per connection (budget ${budget})`);
    }
  },
);
