// ConnectionSet (pkg/net/connection-set.ts): counts sockets until they close,
// reuses the slots they leave, destroys what is still open, and leaves nothing
// in the old generation as connections come and go.

import assert from 'node:assert/strict';
import { EventEmitter, once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { ConnectionSet } from '../../pkg/net/connection-set.js';
import { assertTableStaysPut } from '../support/old-generation.js';
import { distUrl as url } from '../support/v8-natives.js';

const LIMIT = { timeout: 30_000 };

test('ConnectionSet counts real sockets until they close, reuses their slots, and destroyAll() ends the rest', LIMIT, async (t) => {
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
  // Four more: three take the free slots, one a new slot.
  const open2 = [...first.slice(3), ...(await open(4))];
  await sizeReaches(6);
  const ended = open2.map((c) => once(c, 'close'));
  set.destroyAll();
  await Promise.all(ended);
  await sizeReaches(0);
});

test('ConnectionSet lets a flood’s slots go once it is empty, and keeps counting after', LIMIT, () => {
  const set = new ConnectionSet<EventEmitter & { destroy(): void }>();
  const slots = (): number => (set as unknown as { sockets: unknown[] }).sockets.length;
  const make = (): EventEmitter & { destroy(): void } => Object.assign(new EventEmitter(), { destroy() {} });
  const flood = Array.from({ length: 500 }, make);
  for (const c of flood) set.add(c);
  assert.equal(set.size, 500);
  for (const c of flood.slice(0, 499)) c.emit('close');
  assert.equal(set.size, 1);
  assert.equal(slots(), 500, 'slots stay while a connection is open');
  flood[499]!.emit('close');
  assert.equal(set.size, 0);
  assert.equal(slots(), 0, 'an empty set keeps none of the flood’s slots');
  const later = [make(), make()];
  for (const c of later) set.add(c);
  assert.equal(set.size, 2);
  later[0]!.emit('close');
  assert.equal(set.size, 1);
  // A small set that empties keeps its slots.
  later[1]!.emit('close');
  assert.equal(slots(), 2);
});

test('a long-lived ConnectionSet whose sockets come and go leaves nothing in the old generation; a Set leaves its replaced tables', LIMIT, () => {
  assertTableStaysPut(
    `const { EventEmitter } = await import('node:events');
    const { ConnectionSet } = await import(${url('dist/pkg/net/connection-set.js')});
    class PlainSet {
      sockets = new Set();
      add(s) { this.sockets.add(s); s.once('close', () => this.sockets.delete(s)); }
    }
    function perSocket(set) {
      for (let i = 0; i < 3; i++) set.add(new EventEmitter());
      return oldBytesPerSync(() => {
        const s = new EventEmitter();
        set.add(s);
        s.emit('close');
      });
    }
    const control = perSocket(new PlainSet());
    const ours = perSocket(new ConnectionSet());
    console.log(JSON.stringify({ ours, control }));`,
    { ours: 'ConnectionSet', control: 'Set', item: 'socket' },
  );
});
