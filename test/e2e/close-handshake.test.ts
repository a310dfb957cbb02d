// Closing finishes in milliseconds whatever state the connection is in. A
// client that resets mid-transfer while its target is still sending used to
// leave the agent's side open until a 10 s timer dropped it, holding the
// target socket and a megabyte of buffers; under churn that piled up.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { connectVia, startFirehose, startTunnel, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

for (const flowControl of [true, false]) {
  test(
    `clients that reset mid-transfer while the target sends: the agent lets go within a second (${flowControl ? 'with' : 'without'} flow control)`,
    LIMIT,
    async (t) => {
      const h = harness(t);
      // A target that sends as fast as it is let, forever.
      const target = await startFirehose(h);
      const { server, agent } = await startTunnel(h, flowControl ? {} : { agent: { connection: { connWindow: 0 } } });
      // Each client reads a little, then resets, while its target keeps sending.
      let maxOpen = 0;
      await Promise.all(
        Array.from({ length: 30 }, async () => {
          const c = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
          assert.equal(c.status, 200, c.head);
          await new Promise<void>((resolve) => {
            c.socket.once('data', () => {
              maxOpen = Math.max(maxOpen, agent.clients.connCount);
              c.socket.destroy();
              resolve();
            });
            c.socket.resume();
          });
        }),
      );
      assert.ok(maxOpen > 1, 'connections overlapped');
      const resetAt = performance.now();
      await waitFor('the agent to drop every connection and target socket', () => agent.clients.connCount === 0 && target.sockets.size === 0, 5000);
      const tookMs = performance.now() - resetAt;
      assert.ok(tookMs < 1000, `closing took ${Math.round(tookMs)} ms`);
      await waitFor('the server tables empty', () => server.tunnel.establishedCount() === 0);
    },
  );
}

test(
  'once the server closes a connection, the agent stops reading its target and closes it, even a target that keeps sending after our FIN',
  LIMIT,
  async (t) => {
    const h = harness(t);
    // Half-open: our FIN does not end it; it sends until its socket is closed.
    // An agent that kept reading (and dropping) what it sends would hold it forever.
    const block = Buffer.alloc(16 * 1024, 5);
    const sockets = new Set<Socket>();
    const target = createServer({ allowHalfOpen: true }, (s) => {
      sockets.add(s);
      s.on('error', () => {});
      s.once('close', () => sockets.delete(s));
      s.resume();
      const pump = (): void => {
        while (!s.destroyed && s.writable && s.write(block));
      };
      s.on('drain', pump);
      pump();
    });
    target.listen(0, '127.0.0.1');
    await once(target, 'listening');
    h.defer(
      () =>
        new Promise<void>((resolve) => {
          for (const s of sockets) s.destroy();
          target.close(() => resolve());
        }),
    );
    const { server, agent } = await startTunnel(h);
    for (let i = 0; i < 5; i++) {
      // A normal close from the server (CLOSE_REQ without an error), as the egress frontend sends when its client
      // closes; a caller that resets would have the agent reset the target instead.
      const conn = await server.tunnel.dial(`127.0.0.1:${(target.address() as AddressInfo).port}`);
      await new Promise<void>((resolve) => conn.once('data', () => resolve()));
      conn.destroy();
    }
    await waitFor('the agent to close every target socket', () => sockets.size === 0 && agent.clients.connCount === 0, 20_000);
    await waitFor('the server tables empty', () => server.tunnel.establishedCount() === 0);
    // Closed because the agent stopped reading, not by the close timer that drops a connection that never finishes.
    const timedOut = agent.log.records.filter((r) => JSON.stringify(r).includes('did not finish closing'));
    assert.deepEqual(timedOut, []);
  },
);
