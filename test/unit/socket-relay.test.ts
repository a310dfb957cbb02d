// A tunnelled connection joined straight to a socket (SocketRelay), on both
// sides: the agent's EndpointConn (owes exactly one CLOSE_RSP; the target's
// reset is that CLOSE_RSP's error) and the server's TunnelRelay (ends with
// CLOSE_REQ; the agent's error resets the caller). Real loopback sockets; the
// link is a recording fake, so every packet and every pause/resume of the
// shared stream is counted.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import { COALESCE_BELOW, COALESCE_CHUNK } from '../../pkg/mux/coalescer.js';
import type { SocketRelay } from '../../pkg/mux/socket-relay.js';
import { TunnelRelay } from '../../pkg/tunnel/tunnel-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { waitFor } from '../support/tunnel.js';
import { payloads, prng } from '../support/payload-mix.js';
import { RecordingLink } from '../support/recording-link.js';

const LIMIT = { timeout: 20_000 };
const FLOW = { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 };

/**
 * Two ends of one loopback TCP connection: `near` is joined to the relay, `far`
 * plays the target or the caller. `unix`: a Unix socket in a temp dir instead,
 * whose buffers fill after a few hundred KiB (loopback TCP's after megabytes).
 */
async function socketPair(h: Harness, opts: { unix?: boolean } = {}): Promise<{ near: Socket; far: Socket }> {
  const server = createServer({ allowHalfOpen: true });
  let path: string | undefined;
  if (opts.unix === true) {
    const dir = mkdtempSync(join(tmpdir(), 'yt-relay-'));
    h.defer(() => rmSync(dir, { recursive: true, force: true }));
    path = join(dir, 'relay.sock');
    server.listen(path);
  } else {
    server.listen(0, '127.0.0.1');
  }
  await once(server, 'listening');
  h.defer(() => new Promise<void>((r) => server.close(() => r())));
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const near =
    path !== undefined
      ? connect({ path, allowHalfOpen: true })
      : connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, allowHalfOpen: true, noDelay: true });
  const [far] = await accepted;
  await once(near, 'connect');
  far.on('error', () => {});
  h.defer(() => {
    near.destroy();
    far.destroy();
  });
  return { near, far };
}

/** The relay's end: resolves with the error it ended with (undefined for a clean close). */
function ended(relay: SocketRelay): Promise<Error | undefined> {
  return new Promise((resolve) => {
    relay.onClose = resolve;
  });
}

function endpoint(link: RecordingLink, opts: ConstructorParameters<typeof EndpointConn>[3] = {}, connectID = 7n): EndpointConn {
  return new EndpointConn(link, connectID, '10.0.0.5:10250', opts);
}

function tunnelRelay(link: RecordingLink, opts: ConstructorParameters<typeof TunnelRelay>[3] = {}, agent: { halfClose?: boolean } = {}): TunnelRelay {
  return new TunnelRelay({ agentID: 'node-a', link, halfClose: agent.halfClose === true }, 9n, '10.0.0.5:10250', opts);
}

async function readAtLeast(socket: Socket, n: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let got = 0;
  while (got < n) {
    const [chunk] = (await once(socket, 'data')) as [Buffer];
    chunks.push(chunk);
    got += chunk.length;
  }
  return Buffer.concat(chunks);
}

test('DATA delivered before the socket is attached is written first, then what follows', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  const link = new RecordingLink();
  const relay = endpoint(link);
  h.defer(() => relay.destroy());
  relay.deliver(Buffer.from('early '));
  relay.attach(near);
  relay.deliver(Buffer.from('late'));
  assert.equal((await readAtLeast(far, 10)).toString(), 'early late');
  assert.equal(relay.bytesReceived, 10);
});

/** Records what the relay hands `socket`, as it is written. */
function recordWrites(socket: Socket): Buffer[] {
  const written: Buffer[] = [];
  const write = socket.write.bind(socket) as (chunk: Buffer, cb?: () => void) => boolean;
  socket.write = ((chunk: Buffer, cb?: () => void) => {
    written.push(chunk);
    return write(chunk, cb);
  }) as typeof socket.write;
  return written;
}

/** Delivers payloads of `size` until the socket keeps what it is given (the kernel's buffers are full); returns them. */
async function backUp(relay: SocketRelay, socket: Socket, size = 64 * 1024): Promise<Buffer[]> {
  const sent: Buffer[] = [];
  for (let i = 0; i < 1000 && socket.writableLength === 0; i++) {
    const chunk = Buffer.alloc(size, i % 251);
    sent.push(chunk);
    relay.deliver(chunk);
    await tick();
  }
  assert.ok(socket.writableLength > 0, 'the reader stopped reading');
  return sent;
}

/** Reads from `socket` until its end; resolves with every byte. */
async function readToEnd(socket: Socket): Promise<Buffer> {
  const got: Buffer[] = [];
  socket.on('data', (c: Buffer) => got.push(c));
  socket.resume();
  await once(socket, 'end');
  return Buffer.concat(got);
}

test('EndpointConn: small payloads that wait behind a target that does not read are written together, in memory of their own', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  far.pause();
  const link = new RecordingLink();
  const relay = endpoint(link, { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 * 1024 } });
  h.defer(() => relay.destroy());
  relay.attach(near);
  const written = recordWrites(near);
  const expected = await backUp(relay, near);
  const backedUp = written.length;
  // 1-byte payloads, each a view of a 64 KiB read (as from HTTP/2): they wait, held, not written one by one.
  const read = Buffer.alloc(64 * 1024, 2);
  const small = 20_000;
  for (let i = 0; i < small; i++) {
    const one = read.subarray(i, i + 1);
    expected.push(one);
    relay.deliver(one);
  }
  let waiting = written.slice(backedUp);
  assert.equal(waiting.length, Math.floor(small / COALESCE_CHUNK), 'one write per full chunk');
  assert.ok(
    waiting.every((c) => c.length === COALESCE_CHUNK && c.buffer.byteLength === COALESCE_CHUNK),
    'each a chunk of its own memory, not a view of a read',
  );
  // A payload that is not copied goes after the bytes held before it; they keep about their bytes.
  const large = Buffer.alloc(2 * COALESCE_BELOW, 3);
  expected.push(large);
  relay.deliver(large);
  waiting = written.slice(backedUp);
  const rest = waiting.at(-2)!;
  assert.equal(rest.length, small % COALESCE_CHUNK);
  assert.ok(rest.buffer.byteLength < 4 * rest.length, `the rest keeps ${rest.buffer.byteLength} bytes for ${rest.length}`);
  assert.equal(waiting.at(-1), large, 'written as it is');
  relay.remoteClose();
  assert.ok((await readToEnd(far)).equals(Buffer.concat(expected)), 'every byte, in order, then the end');
});

const releases = {
  // The socket went over its own mark: a 'drain' comes, and the link, paused for it, goes on.
  "after the socket's 'drain'": { piece: 64 * 1024, opts: { highWaterMark: 1024 }, drainDue: true },
  // The socket holds less than its mark: no 'drain' comes. The first small payload is
  // written at once (copied), and the others wait for its write to call back.
  "with no 'drain' due (the socket below its own mark)": {
    piece: COALESCE_BELOW,
    opts: { flow: { sendWindow: 64 * 1024, receiveWindow: 1024 * 1024 } },
    drainDue: false,
  },
};

for (const [when, { piece, opts, drainDue }] of Object.entries(releases)) {
  test(`held bytes go out once the socket has written what it had, with no more DATA to push them: ${when}`, LIMIT, async (t) => {
    const h = harness(t);
    const { near, far } = await socketPair(h, { unix: true });
    far.pause();
    const link = new RecordingLink();
    const relay = endpoint(link, opts);
    h.defer(() => relay.destroy());
    relay.attach(near);
    const written = recordWrites(near);
    const expected = await backUp(relay, near, piece);
    assert.equal(near.writableNeedDrain, drainDue);
    const before = written.length;
    for (let i = 0; i < 50; i++) {
      const b = Buffer.from([i]);
      expected.push(b);
      relay.deliver(b);
    }
    assert.equal(written.length, before + (drainDue ? 0 : 1), 'the small payloads are held');
    const total = Buffer.concat(expected).length;
    // The reader catches up; the peer, out of window or paused, sends nothing more.
    const got: Buffer[] = [];
    let n = 0;
    far.on('data', (c: Buffer) => {
      got.push(c);
      n += c.length;
    });
    far.resume();
    await waitFor('every byte', () => n === total, 5000);
    assert.ok(Buffer.concat(got).equals(Buffer.concat(expected)));
    assert.equal(link.pauses, drainDue ? 1 : 0);
    if (drainDue) await waitFor('the link resumed', () => link.resumes === 1);
  });
}

const endings: Record<string, { make: (link: RecordingLink) => SocketRelay; end: (relay: SocketRelay) => void }> = {
  "EndpointConn, the server's CLOSE_REQ": { make: (link) => endpoint(link), end: (relay) => relay.remoteClose() },
  "TunnelRelay, the agent's CLOSE_WRITE": {
    make: (link) => tunnelRelay(link, { halfClose: true }, { halfClose: true }),
    end: (relay) => relay.remoteEndWrite(),
  },
};

for (const [name, { make, end }] of Object.entries(endings)) {
  for (const seed of [1, 2, 3]) {
    test(
      `${name}: mixed small and large payloads, some before the socket, a reader that stops and goes at odd moments: every byte in order, then the end (seed ${seed})`,
      LIMIT,
      async (t) => {
        const h = harness(t);
        const { near, far } = await socketPair(h, { unix: true });
        const rand = prng(seed);
        const next = payloads(rand);
        const link = new RecordingLink();
        const relay = make(link);
        h.defer(() => relay.destroy());
        const expected: Buffer[] = [];
        const deliver = (): void => {
          const p = next();
          expected.push(p);
          relay.deliver(p);
        };
        for (let i = 0; i < 40; i++) deliver();
        relay.attach(near);
        const got: Buffer[] = [];
        far.on('data', (c: Buffer) => got.push(c));
        for (let step = 0; step < 300; step++) {
          const r = rand();
          if (r < 0.15) far.pause();
          else if (r < 0.3) far.resume();
          const burst = Math.floor(rand() * 12);
          for (let i = 0; i < burst; i++) deliver();
          // Drains and write callbacks come in between, or not.
          if (rand() < 0.6) await tick();
        }
        end(relay);
        far.resume();
        await once(far, 'end');
        const want = Buffer.concat(expected);
        const have = Buffer.concat(got);
        assert.equal(have.length, want.length);
        assert.ok(have.equals(want), 'the bytes in order');
      },
    );
  }
}

test('held before the socket is attached, with the end: written in order, then the end', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  const link = new RecordingLink();
  const relay = endpoint(link);
  h.defer(() => relay.destroy());
  const parts = [
    Buffer.from('a'),
    Buffer.from('b'),
    Buffer.alloc(COALESCE_BELOW, 'L'),
    Buffer.from('c'),
    Buffer.alloc(COALESCE_CHUNK - 1, 'm'),
    Buffer.from('d'),
  ];
  for (const p of parts) relay.deliver(p);
  relay.remoteClose();
  relay.attach(near);
  assert.ok((await readToEnd(far)).equals(Buffer.concat(parts)));
});

test('attach() with bytes read during the dial and a socket whose EOF came then: the bytes go first, then the end', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  const link = new RecordingLink();
  const relay = tunnelRelay(link, { halfClose: true }, { halfClose: true });
  h.defer(() => relay.destroy());
  const early: Buffer[] = [];
  near.on('data', (c: Buffer) => early.push(c));
  far.end('sent during the dial');
  await once(near, 'end');
  near.removeAllListeners('data');
  relay.attach(near, early);
  assert.equal(link.sentBytes().toString(), 'sent during the dial');
  assert.deepEqual(link.control, [{ type: 'CLOSE_WRITE', connectID: 9n }]);
});

test('with flow control: a slow reader whose peer keeps to the window never pauses the shared link; a byte past the window does', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  const link = new RecordingLink();
  const relay = endpoint(link, { flow: FLOW });
  h.defer(() => relay.destroy());
  relay.attach(near);
  far.pause();
  // A well-behaved peer: sends only what it was granted, in 1 KiB pieces, until the reader's buffers are full.
  const granted = (): number => FLOW.receiveWindow + link.ofType('WINDOW_UPDATE').reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' ? Number(p.bytes) : 0), 0);
  let sent = 0;
  for (let idle = 0; idle < 3 && sent < 64 * 1024 * 1024;) {
    const credit = granted() - sent;
    if (credit <= 0) {
      idle++;
      await new Promise((r) => setTimeout(r, 20));
      continue;
    }
    idle = 0;
    const n = Math.min(1024, credit);
    relay.deliver(Buffer.alloc(n, 4));
    sent += n;
    if (sent % (64 * 1024) === 0) await new Promise((r) => setImmediate(r));
  }
  assert.ok(near.writableLength > 0, 'the reader fell behind');
  assert.equal(link.pauses, 0, 'a peer within its window never pauses the link');
  relay.deliver(Buffer.alloc(1024, 5));
  assert.equal(link.pauses, 1, 'one past the window does');
});

for (const highWaterMark of [64 * 1024, 1024]) {
  test(
    `without flow control (highWaterMark ${highWaterMark}): a caller that reads nothing pauses the shared link once; its reading resumes it once`,
    LIMIT,
    async (t) => {
      const h = harness(t);
      const { near, far } = await socketPair(h);
      const link = new RecordingLink();
      const relay = endpoint(link, { highWaterMark });
      h.defer(() => relay.destroy());
      relay.attach(near);
      far.pause();
      // Small pieces, so that the mark is crossed while the socket's own (16 KiB) is not.
      const piece = Buffer.alloc(512, 3);
      let delivered = 0;
      // Until the kernel's buffers are full and the socket holds the mark; a paused link delivers no more.
      while (link.pauses === 0 && delivered < 100_000) {
        relay.deliver(piece);
        delivered++;
        if (delivered % 64 === 0) await new Promise((r) => setImmediate(r));
      }
      assert.equal(link.pauses, 1, 'the link was paused for the full socket');
      relay.deliver(piece);
      assert.equal(link.pauses, 1, 'once');
      assert.equal(link.resumes, 0);
      far.resume();
      await waitFor('the link resumed', () => link.resumes === 1);
      assert.equal(link.pauses, 1);
    },
  );
}

/**
 * A link whose transport can go (session resume) from suspend() until
 * resume(): DATA callbacks wait meanwhile. Counts how often a timer asked
 * whether it is suspended, so a test can wait for timers that expired during
 * the blip.
 */
class SuspendableLink extends RecordingLink {
  private isSuspended = false;
  asked = 0;

  get suspended(): boolean {
    this.asked++;
    return this.isSuspended;
  }

  suspend(): void {
    this.isSuspended = true;
    this.holdCallbacks = true;
  }

  resume(): void {
    this.isSuspended = false;
    this.holdCallbacks = false;
    while (this.pendingCallbacks > 0) this.releaseOne();
  }
}

test('TunnelRelay on a suspended link: its last bytes wait for the link however many close timeouts pass, then it closes cleanly', LIMIT, async (t) => {
  const h = harness(t);
  const { near, far } = await socketPair(h);
  const link = new SuspendableLink();
  link.suspend();
  const relay = tunnelRelay(link, { halfClose: true, closeTimeoutMs: 50 }, { halfClose: true });
  h.defer(() => relay.destroy());
  const end = ended(relay);
  relay.attach(near);
  // The agent has finished (CLOSE_WRITE); the caller sends its tail and ends: its socket
  // closes while the tail waits for the link, and the close timer starts.
  relay.remoteEndWrite();
  far.end('the tail');
  await waitFor('the tail handed to the link', () => link.pendingCallbacks === 1);
  // The close timer expires three times during the blip; each time the link is still suspended.
  await waitFor('three close timeouts during the blip', () => link.asked >= 3);
  assert.equal(relay.closed, false, 'the relay waited for its link');
  link.resume();
  assert.equal(await end, undefined, 'a clean close');
  assert.equal(link.sentBytes().toString(), 'the tail');
  assert.deepEqual(
    link.ofType('CLOSE_REQ').map((p) => (p as { error?: string }).error ?? ''),
    [''],
    'one CLOSE_REQ, without an error',
  );
});

test(
  "TunnelRelay on a suspended link: waiting for the agent's CLOSE_RSP outlasts the close timeout; the answer after the resume closes it cleanly",
  LIMIT,
  async (t) => {
    const h = harness(t);
    const { near, far } = await socketPair(h);
    const link = new SuspendableLink();
    const relay = tunnelRelay(link, { closeTimeoutMs: 50 });
    h.defer(() => relay.destroy());
    const end = ended(relay);
    relay.attach(near);
    // The caller ends; CLOSE_REQ goes out, and the agent's CLOSE_RSP is awaited while the link is down.
    link.suspend();
    far.end();
    await waitFor('CLOSE_REQ sent', () => link.ofType('CLOSE_REQ').length === 1);
    const askedBefore = link.asked;
    await waitFor('three close timeouts during the blip', () => link.asked >= askedBefore + 3);
    assert.equal(relay.closed, false, 'the relay waited for the agent');
    link.resume();
    relay.remoteClose();
    assert.equal(await end, undefined, 'a clean close');
    assert.equal((link.ofType('CLOSE_REQ')[0] as { error?: string }).error ?? '', '');
  },
);

test('a finished relay leaves none of its handlers on the socket, only a listener that takes a late error', LIMIT, async (t) => {
  const handlers = (relay: SocketRelay): Set<unknown> => {
    const r = relay as unknown as Record<string, unknown>;
    return new Set(['onSocketData', 'onSocketEnd', 'onSocketError', 'onSocketClose', 'onSocketDrain', 'closeSocketCleanly'].map((k) => r[k]));
  };
  const endings: Record<string, (relay: SocketRelay, far: Socket) => void> = {
    'the target ends': (_relay, far) => far.end('bye'),
    'the peer closes (CLOSE_REQ)': (relay) => relay.remoteClose(),
    'the target resets': (_relay, far) => far.resetAndDestroy(),
    'destroy() with an error': (relay) => relay.destroy(new Error('cut here')),
  };
  const h = harness(t);
  for (const [how, end] of Object.entries(endings)) {
    const { near, far } = await socketPair(h);
    const relay = endpoint(new RecordingLink());
    const own = handlers(relay);
    assert.equal(own.size, 6, 'the handlers the test looks for exist');
    const closed = ended(relay);
    relay.attach(near);
    end(relay, far);
    await closed;
    const left = near.eventNames().flatMap((e) => near.rawListeners(e).map((l) => (l as { listener?: unknown }).listener ?? l));
    assert.equal(left.filter((l) => own.has(l)).length, 0, `${how}: the relay's handlers are off the socket`);
    assert.ok(near.listenerCount('error') > 0, `${how}: an error after the end is still taken`);
    assert.doesNotThrow(() => near.emit('error', new Error('late')), how);
  }
});
