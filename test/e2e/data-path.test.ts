// Bytes through the whole path: CONNECT over the Unix socket → server →
// gRPC over mutual TLS → agent → TCP target, and back.

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { connectVia, readExactly, startEchoServer, startTCPServer, startTunnel, waitFor, waitForSteady } from '../support/tunnel.js';

/** Writes `data` in 64 KiB pieces, honouring back-pressure. */
async function writeAll(socket: Socket, data: Buffer): Promise<void> {
  const piece = 64 * 1024;
  for (let off = 0; off < data.length; off += piece) {
    if (!socket.write(data.subarray(off, off + piece))) {
      await new Promise<void>((resolve, reject) => {
        const onDrain = (): void => {
          socket.off('close', onClose);
          resolve();
        };
        const onClose = (): void => {
          socket.off('drain', onDrain);
          reject(new Error('socket closed while writing'));
        };
        socket.once('drain', onDrain);
        socket.once('close', onClose);
      });
    }
  }
}

/** Reads `n` bytes and returns their SHA-256, without keeping them. */
function hashOf(socket: Socket, n: number, initial: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    let have = 0;
    const take = (c: Buffer): void => {
      const use = c.subarray(0, n - have);
      hash.update(use);
      have += use.length;
      if (have === n) {
        socket.off('data', take);
        socket.off('close', onClose);
        resolve(hash.digest('hex'));
      }
    };
    const onClose = (): void => reject(new Error(`socket closed after ${have} of ${n} bytes`));
    socket.on('data', take);
    socket.once('close', onClose);
    if (initial.length > 0) take(initial);
    socket.resume();
  });
}

test('64 MiB echoed byte-exact through the tunnel, both ways at once', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server } = await startTunnel(h);
  const size = 64 * 1024 * 1024;
  const data = randomBytes(size);
  const want = createHash('sha256').update(data).digest('hex');
  const res = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(res.status, 200);
  const [got] = await Promise.all([hashOf(res.socket, size, res.rest), writeAll(res.socket, data)]);
  assert.equal(got, want);
  res.socket.destroy();
  await waitFor('the tunnel to close it', () => server.tunnel.establishedCount() === 0, 2000);
});

test('1,000 concurrent connections through one agent are all byte-exact', async (t) => {
  const h = harness(t);
  const echo = await startEchoServer(h);
  const { server, agent } = await startTunnel(h);
  const count = 1000;
  const sockets: Socket[] = [];
  h.defer(() => sockets.forEach((s) => s.destroy()));
  // Open in waves so the Unix socket's accept backlog is never the limit, then use them all at once.
  for (let wave = 0; wave < count; wave += 100) {
    const opened = await Promise.all(Array.from({ length: Math.min(100, count - wave) }, () => connectVia(server.udsPath, `127.0.0.1:${echo.port}`)));
    for (const r of opened) {
      assert.equal(r.status, 200);
      assert.equal(r.rest.length, 0);
      sockets.push(r.socket);
    }
  }
  await waitFor('every target connection', () => echo.sockets.size === count);
  assert.equal(server.tunnel.establishedCount(), count);
  assert.equal(agent.clients.connCount, count);

  const payloads = sockets.map((_, i) => Buffer.concat([Buffer.from(`connection ${i}:`), randomBytes(8 * 1024 + i)]));
  const results = await Promise.all(
    sockets.map(async (s, i) => {
      const p = payloads[i]!;
      const [back] = await Promise.all([readExactly(s, p.length), writeAll(s, p)]);
      return back.equals(p);
    }),
  );
  assert.equal(results.filter((ok) => !ok).length, 0, 'every connection got exactly its own bytes back');
  for (const s of sockets) s.destroy();
  await waitFor(
    'all connections to close everywhere',
    () => server.tunnel.establishedCount() === 0 && agent.clients.connCount === 0 && echo.sockets.size === 0,
    10_000,
  );
});

test('a reader that stops reading makes the sender wait; memory does not grow', async (t) => {
  const h = harness(t);
  // The target writes as fast as it may; the client reads nothing for a while.
  let written = 0;
  const chunk = Buffer.alloc(64 * 1024, 1);
  const target = await startTCPServer(h, (s) => {
    const pump = (): void => {
      while (s.writable && s.write(chunk)) written += chunk.length;
      if (s.writable) written += chunk.length;
    };
    s.on('drain', pump);
    pump();
  });
  const { server } = await startTunnel(h);
  const echo = await startEchoServer(h);
  const res = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  assert.equal(res.status, 200);
  const stalledAt = await waitForSteady('the blocked target', () => written);
  // While 16 MiB more cross the same link on another connection, the blocked one gains nothing.
  const other = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  const more = randomBytes(16 * 1024 * 1024);
  const [echoed] = await Promise.all([hashOf(other.socket, more.length, other.rest), writeAll(other.socket, more)]);
  assert.equal(echoed, createHash('sha256').update(more).digest('hex'));
  other.socket.destroy();
  // Bounded: socket buffers + per-connection buffers + the HTTP/2 windows, not the 100s of MiB a loop makes in a second.
  assert.equal(written, stalledAt, 'the target is blocked while nobody reads');
  assert.ok(written < 64 * 1024 * 1024, `target wrote ${written} bytes before being stopped`);
  // Reading resumes the flow.
  await readExactly(res.socket, written + 1024 * 1024, res.rest);
  res.socket.destroy();
  void target;
});

test('a target that writes and closes at once loses nothing while the path is congested', async (t) => {
  const h = harness(t);
  const size = 8 * 1024 * 1024;
  const payload = randomBytes(size);
  const want = createHash('sha256').update(payload).digest('hex');
  const sending: Socket[] = [];
  const target = await startTCPServer(h, (s) => {
    sending.push(s);
    s.end(payload);
  });
  const { server } = await startTunnel(h);
  const flows = await Promise.all(Array.from({ length: 4 }, () => connectVia(server.udsPath, `127.0.0.1:${target.port}`)));
  // Nobody reads until every buffer on the path has filled behind the target's end (what it has handed to its kernel stops growing).
  await waitFor('the four target connections', () => sending.length === 4);
  await waitForSteady('the congested path', () => sending.reduce((n, s) => n + size - s.writableLength, 0));
  const hashes = await Promise.all(flows.map((f) => hashOf(f.socket, size, f.rest)));
  assert.deepEqual(
    hashes,
    flows.map(() => want),
  );
  for (const f of flows) f.socket.destroy();
});
