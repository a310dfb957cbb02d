// Churn: many connections ending every way a connection ends — a normal
// close, the target closing first, the client resetting mid-transfer, the
// client giving up while the dial is pending — and afterwards every table is
// empty, every socket closed, and nothing waits on a timer; the targets of
// normal ends saw normal ends, never a reset. CHURN_CONNECTIONS sets the count
// (default 20,000).

import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { connectVia, startChurnTarget, startHangingListener, startTunnel, tunnelTablesEmpty, waitFor } from '../support/tunnel.js';

const TOTAL = Number(process.env.CHURN_CONNECTIONS ?? 20_000);
const CONCURRENCY = 200;

// The limit is for a loaded machine, not a speed check: 41 s on CI's usual load, 88-198 s here at load 9-13 with two
// busy-link files beside it; CI's loads of 16-19 once took it past 300 s.
test(`churn: ${TOTAL} connections ending every way leave every table empty and nothing open`, { timeout: 600_000 }, async (t) => {
  const h = harness(t);
  // First byte from the client says how the target behaves: 'e' echo, 'c' answer then close first, 's' stream until gone.
  // How each target connection's end first showed: a clean EOF or an error (a reset), by mode.
  const targetEnds: Record<string, { eof: number; reset: number }> = { e: { eof: 0, reset: 0 }, c: { eof: 0, reset: 0 }, s: { eof: 0, reset: 0 } };
  const target = await startChurnTarget(h, (s, mode) => {
    let seen = false;
    const saw = (how: 'eof' | 'reset'): void => {
      if (!seen) targetEnds[mode]![how]++;
      seen = true;
    };
    s.once('end', () => saw('eof'));
    s.once('error', () => saw('reset'));
  });
  const hanging = await startHangingListener(h);
  const { server, agent } = await startTunnel(h, { agent: { dialTimeoutMs: 60_000 } });
  const counts = { normal: 0, targetFirst: 0, reset: 0, cancelled: 0 };

  const one = async (i: number): Promise<void> => {
    switch (i % 4) {
      case 0: {
        const r = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
        r.socket.write('e-hello');
        await new Promise<void>((resolve) => r.socket.once('data', () => resolve()).resume());
        r.socket.end();
        await new Promise((resolve) => r.socket.once('close', resolve));
        counts.normal++;
        return;
      }
      case 1: {
        const r = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
        r.socket.write('c');
        r.socket.resume();
        await new Promise((resolve) => r.socket.once('close', resolve));
        counts.targetFirst++;
        return;
      }
      case 2: {
        const r = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
        r.socket.write('s');
        await new Promise<void>((resolve) => r.socket.once('data', () => resolve()).resume());
        r.socket.destroy();
        counts.reset++;
        return;
      }
      default: {
        // Gives up while the agent's dial to a listener that never accepts is pending.
        const s = connect(server.udsPath);
        s.on('error', () => {});
        s.write(`CONNECT 127.0.0.1:${hanging} HTTP/1.1\r\nHost: x\r\n\r\n`);
        await waitFor('the dial to be pending', () => server.tunnel.pendingDialCount > 0, 10_000);
        s.destroy();
        counts.cancelled++;
      }
    }
  };
  let next = 0;
  // A line every 30 s: a run cut by its limit says whether it crawled or stood still.
  const startedAt = performance.now();
  const progress = setInterval(() => {
    const s = Math.round((performance.now() - startedAt) / 1000);
    console.log(`churn after ${s} s: ${next} of ${TOTAL} started, ended ${JSON.stringify(counts)}`);
  }, 30_000);
  h.defer(() => clearInterval(progress));
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < TOTAL) await one(next++);
    }),
  );
  assert.deepEqual(counts, { normal: TOTAL / 4, targetFirst: TOTAL / 4, reset: TOTAL / 4, cancelled: TOTAL / 4 });
  await waitFor('every table empty', () => tunnelTablesEmpty(server, agent) && target.sockets.size === 0, 10_000);
  // Normal ends stay normal under churn: no target of a normal close or of a target-first close saw a reset.
  // (A caller that resets mid-stream resets its target; the count is printed, not asserted: a caller whose
  // last byte was read before it closed looks like an EOF on the Unix socket.)
  console.log('how target connections ended first', JSON.stringify(targetEnds));
  assert.deepEqual({ e: targetEnds.e!.reset, c: targetEnds.c!.reset }, { e: 0, c: 0 });
  // The harness then checks that no socket, handle or ref'd timer is left.
});
