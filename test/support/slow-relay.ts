// A loopback TCP relay that carries one direction at a fixed rate, as a slow
// edge uplink would: what the sender writes piles up in the kernel's socket
// buffers in front of it, exactly where a real slow link queues it.

import { connect, createServer, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Harness } from './harness.js';

/** Forwards `from` to `to` at `bytesPerSecond`: each chunk read holds the next read back for as long as the link takes to send it. */
function throttled(from: Socket, to: Socket, bytesPerSecond: number, timers: Set<NodeJS.Timeout>): void {
  from.on('data', (chunk: Buffer) => {
    to.write(chunk);
    from.pause();
    const timer = setTimeout(
      () => {
        timers.delete(timer);
        if (!from.destroyed) from.resume();
      },
      Math.ceil((chunk.length * 1000) / bytesPerSecond),
    );
    timers.add(timer);
  });
  from.once('end', () => to.end());
}

/** A relay to 127.0.0.1:`targetPort`; bytes from the connecting side (an agent, the edge) go at `upBytesPerSecond`, the rest at once. */
export async function startSlowRelay(h: Harness, targetPort: number, upBytesPerSecond: number): Promise<{ port: number }> {
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.setNoDelay(true);
      s.on('error', () => {});
      s.once('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    throttled(client, upstream, upBytesPerSecond, timers);
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(
    () =>
      new Promise<void>((resolve) => {
        for (const t of timers) clearTimeout(t);
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as AddressInfo).port };
}
