// ConnectionSet (pkg/net/connection-set.ts): counts sockets until they close
// and destroys what is still open.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { ConnectionSet } from '../../pkg/net/connection-set.js';

const LIMIT = { timeout: 30_000 };

test('ConnectionSet counts real sockets until they close, and destroyAll() ends the rest', LIMIT, async (t) => {
  const set = new ConnectionSet();
  const server = createServer((s) => set.add(s));
  t.after(() => server.close());
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const deadline = Date.now() + 5_000;
  const sizeReaches = async (n: number): Promise<void> => {
    while (set.size !== n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.equal(set.size, n);
  };
  const open = async (n: number): Promise<Socket[]> => {
    const clients = Array.from({ length: n }, () => connect(port, '127.0.0.1'));
    await Promise.all(clients.map((c) => once(c, 'connect')));
    return clients;
  };
  const first = await open(5);
  await sizeReaches(5);
  // Three close from the client side: the server's sockets close and leave the set.
  for (const c of first.slice(0, 3)) c.destroy();
  await sizeReaches(2);
  const open2 = [...first.slice(3), ...(await open(4))];
  await sizeReaches(6);
  const ended = open2.map((c) => once(c, 'close'));
  set.destroyAll();
  await Promise.all(ended);
  await sizeReaches(0);
});
