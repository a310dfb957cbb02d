// Sockets that cost no maps of their own (pkg/net/socket-options.ts): what a
// socket leaves in the old generation once it is gone, measured in a child
// process after two scavenges, with Node's own options as the control; and an
// accepting server that behaves as Node's does (half-open, counts, close,
// maxConnections, the diagnostics channel).

import assert from 'node:assert/strict';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { ACCEPT_REPLACEABLE, acceptWithSocketDefaults } from '../../pkg/net/socket-options.js';
import { MEASURE } from '../support/old-generation.js';
import { distUrl as url, runWithNatives } from '../support/v8-natives.js';

const LIMIT = { timeout: 30_000 };

test(
  'a socket constructed from withSocketDefaults() options leaves nothing in the old generation; from the options net.connect() gives it, its own maps',
  LIMIT,
  () => {
    const out = runWithNatives<{ node: number; complete: number }>(
      `${MEASURE}
    const { Socket } = await import('node:net');
    const { withSocketDefaults } = await import(${url('dist/pkg/net/socket-options.js')});
    const onread = { buffer: Buffer.alloc(64), callback: () => true };
    const node = await oldBytesPer((done) => { new Socket({ allowHalfOpen: true, noDelay: true, onread }).destroy(); setImmediate(done); });
    const complete = await oldBytesPer((done) => { new Socket(withSocketDefaults({ allowHalfOpen: true, noDelay: true, onread })).destroy(); setImmediate(done); });
    console.log(JSON.stringify({ node, complete }));`,
      ['--expose-gc'],
    );
    assert.ok(out.complete < 250, `complete options: ${out.complete} B per socket left in the old generation`);
    // The control: on Node 20 the measurement sees what the options cost (~1 KB per socket).
    if (ACCEPT_REPLACEABLE) assert.ok(out.node > out.complete + 400, `Node's options: ${out.node} B per socket, complete: ${out.complete}`);
  },
);

test(
  'accepted connections leave nothing in the old generation once closed, with acceptWithSocketDefaults(); with Node 20 own accept, ~1 KB each',
  LIMIT,
  () => {
    const out = runWithNatives<{ node: number; ours: number; installed: boolean }>(
      `${MEASURE}
    const { createServer, Socket } = await import('node:net');
    const { acceptWithSocketDefaults, withSocketDefaults } = await import(${url('dist/pkg/net/socket-options.js')});
    async function perConnection(replace) {
      const server = createServer((s) => { s.on('error', () => {}); s.end('x'); });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      const installed = replace ? acceptWithSocketDefaults(server) : false;
      const { port } = server.address();
      // The client's sockets are made from complete options too, so that only the server's count.
      const bytes = await oldBytesPer((done) => {
        const c = new Socket(withSocketDefaults({}));
        c.on('error', () => {});
        c.on('close', () => done());
        c.resume();
        c.connect(port, '127.0.0.1');
      });
      await new Promise((resolve) => server.close(resolve));
      return { bytes, installed };
    }
    const node = await perConnection(false);
    const ours = await perConnection(true);
    console.log(JSON.stringify({ node: node.bytes, ours: ours.bytes, installed: ours.installed }));`,
      ['--expose-gc'],
    );
    assert.equal(out.installed, ACCEPT_REPLACEABLE);
    if (!ACCEPT_REPLACEABLE) return;
    assert.ok(out.ours < 400, `acceptWithSocketDefaults: ${out.ours} B per connection left in the old generation`);
    assert.ok(out.node > out.ours + 800, `Node's accept: ${out.node} B per connection, ours: ${out.ours}`);
  },
);

async function listening(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  assert.equal(acceptWithSocketDefaults(server), ACCEPT_REPLACEABLE);
  return (server.address() as { port: number }).port;
}

/** What `socket` reads until `event`, as text. */
async function textUntil(socket: Socket, event: 'end' | 'close'): Promise<string> {
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (text += d));
  await once(socket, event);
  return text;
}

test('a server accepting with complete options: half-open as asked, counted, closable, published on net.server.socket', LIMIT, async () => {
  const published: unknown[] = [];
  const onPublish = (message: unknown): void => void published.push((message as { socket: Socket }).socket);
  subscribe('net.server.socket', onPublish);
  const server = createServer({ allowHalfOpen: true });
  try {
    const port = await listening(server);
    const accepted = once(server, 'connection') as Promise<[Socket]>;
    const client = connect(port, '127.0.0.1');
    const [socket] = await accepted;
    assert.equal((socket as unknown as { server: Server }).server, server);
    assert.deepEqual(published, [socket]);
    const count = await new Promise<number>((resolve, reject) => server.getConnections((err, n) => (err ? reject(err) : resolve(n))));
    assert.equal(count, 1);

    // The client finishes sending; the server, half-open, still answers.
    client.end('question');
    assert.equal(await textUntil(socket, 'end'), 'question');
    socket.end('answer');
    assert.equal(await textUntil(client, 'close'), 'answer');
    // Closing waits for the accepted socket, which counts itself out.
    await new Promise<void>((resolve) => server.close(() => resolve()));
  } finally {
    unsubscribe('net.server.socket', onPublish);
    if (server.listening) server.close();
  }
});

/** A socket's own fields that hold plain values (what its options and the server's settings became), by name. */
function ownSettings(socket: Socket): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of Reflect.ownKeys(socket)) {
    const name = typeof key === 'symbol' ? (key.description ?? '') : key;
    // Per-connection identities, not settings.
    if (/async_id|trigger/.test(name)) continue;
    const value = (socket as unknown as Record<PropertyKey, unknown>)[key];
    if (value === null || ['boolean', 'number', 'string', 'undefined'].includes(typeof value)) out[name] = value;
  }
  out.readableHighWaterMark = socket.readableHighWaterMark;
  out.writableHighWaterMark = socket.writableHighWaterMark;
  out.allowHalfOpen = socket.allowHalfOpen;
  return out;
}

test(
  'a socket accepted with complete options has the settings Node\u2019s own accept gives it (no delay, keepalive and its delay, high-water marks, half-open)',
  LIMIT,
  async () => {
    const options = { allowHalfOpen: true, noDelay: true, keepAlive: true, keepAliveInitialDelay: 3000, highWaterMark: 32 * 1024 };
    const accepted: Socket[] = [];
    const clients: Socket[] = [];
    const servers = [createServer(options), createServer(options)];
    try {
      for (const [i, server] of servers.entries()) {
        await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
        if (i === 1) assert.equal(acceptWithSocketDefaults(server), ACCEPT_REPLACEABLE);
        const connection = once(server, 'connection') as Promise<[Socket]>;
        clients.push(connect((server.address() as { port: number }).port, '127.0.0.1'));
        accepted.push((await connection)[0]);
      }
      const [node, ours] = accepted.map(ownSettings);
      assert.equal(node!.kSetKeepAliveInitialDelay, 3, 'the control: Node keeps the delay in seconds');
      assert.deepEqual(ours, node);
    } finally {
      for (const s of [...accepted, ...clients]) s.destroy();
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    }
  },
);

test('a server accepting with complete options drops what is over maxConnections, as Node does', LIMIT, async () => {
  const server = createServer((s) => s.on('error', () => {}));
  server.maxConnections = 1;
  const clients: Socket[] = [];
  try {
    const port = await listening(server);
    const first = connect(port, '127.0.0.1');
    clients.push(first);
    await once(server, 'connection');
    const dropped = once(server, 'drop');
    const second = connect(port, '127.0.0.1');
    clients.push(second);
    second.on('error', () => {});
    second.resume();
    await dropped;
    await once(second, 'close');
    assert.equal(first.destroyed, false);
  } finally {
    for (const c of clients) c.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('acceptWithSocketDefaults() changes nothing on a server that is not listening', () => {
  assert.equal(acceptWithSocketDefaults(createServer()), false);
});

test('a Unix-socket server accepting with complete options hands its sockets the server\u2019s pauseOnConnect', LIMIT, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'yt-accept-'));
  const server = createServer({ pauseOnConnect: true });
  try {
    const path = join(dir, 's.sock');
    await new Promise<void>((resolve) => server.listen(path, resolve));
    assert.equal(acceptWithSocketDefaults(server), ACCEPT_REPLACEABLE);
    const accepted = once(server, 'connection') as Promise<[Socket]>;
    const client = connect(path);
    const [socket] = await accepted;
    client.write('x');
    let got = false;
    socket.on('data', () => (got = true));
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(got, false, 'a paused socket reads nothing until resumed');
    socket.resume();
    await once(socket, 'data');
    client.destroy();
    socket.destroy();
  } finally {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  }
});
