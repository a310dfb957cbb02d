// A tunnelled connection's behaviour as one table of cases, each run against
// both shapes of the connection core (conn-core.ts): a PacketConn (a Duplex
// for callers in this process) and a SocketRelay (joined straight to a real
// loopback socket), on the server's side (TunnelConn, TunnelRelay: ends with
// CLOSE_REQ) and the agent's (owes exactly one CLOSE_RSP). A small driver per
// shape says how our end writes, ends, fails and reads; the link is a
// recording fake, so every packet and every pause/resume is counted.
// What only one shape has (the Duplex's back-pressure and pause, the relay's
// socket coalescing and attach) follows the table, one section per shape.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { test } from 'node:test';
import { setImmediate as tick } from 'node:timers/promises';
import { inspect } from 'node:util';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import { BufferPool, releaseSlab } from '../../pkg/mux/buffer-pool.js';
import { AGENT_CLOSE } from '../../pkg/mux/close-handshake.js';
import { ConnTable, TOMBSTONE_MS } from '../../pkg/mux/conn-table.js';
import { COALESCE_BELOW, COALESCE_CHUNK } from '../../pkg/mux/coalescer.js';
import { MAX_DATA_PAYLOAD, PacketConn, type PacketConnOptions } from '../../pkg/mux/packet-conn.js';
import { PauseGate } from '../../pkg/mux/pause-gate.js';
import type { SocketRelay } from '../../pkg/mux/socket-relay.js';
import { ConnectionClosedError } from '../../pkg/protocol/errors.js';
import { emptyIdentifiers } from '../../pkg/protocol/identifiers.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { MAX_AUTO_WINDOW } from '../../pkg/protocol/receive-window.js';
import { Backend } from '../../pkg/tunnel/backend.js';
import { TunnelConn } from '../../pkg/tunnel/tunnel-conn.js';
import { TunnelRelay } from '../../pkg/tunnel/tunnel-relay.js';
import { exposedGc } from '../support/gc.js';
import { harness, type Harness } from '../support/harness.js';
import { payloads, prng } from '../support/payload-mix.js';
import { RecordingLink } from '../support/recording-link.js';
import { waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 20_000 };
const FLOW = { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 };
const ADDRESS = '10.0.0.5:10250';

type Shape = 'PacketConn' | 'SocketRelay';
type Side = 'server' | 'agent';

interface DriverOptions {
  /** Half-close negotiated (on the server's side: the agent negotiated it too). */
  halfClose?: boolean;
  flow?: typeof FLOW;
  closeTimeoutMs?: number;
}

/** What reached our end: its bytes, and whether it ended cleanly (false: it was cut off). */
interface Arrived {
  data: Buffer;
  ended: boolean;
}

/** One connection of either shape, seen from our end (the caller's Duplex, or the far socket). */
interface Driver {
  readonly link: RecordingLink;
  readonly connectID: bigint;
  /** The core's shape: what the peer's packets are handed to. */
  readonly conn: PacketConn | SocketRelay;
  /** Our end sends these bytes. */
  send(data: Buffer | string): void;
  /** Our end ends (EOF, a normal close), after these last bytes. */
  end(data?: string): void;
  /** Our end fails (the caller or target reset). */
  fail(): void;
  /** Reads our end from now until it ends or is cut off. */
  arrived(): Promise<Arrived>;
  /** How the connection ended: undefined for a clean close, else the error. */
  readonly closed: Promise<Error | undefined>;
}

/** A PacketConn with the agent's close handshake: one CLOSE_RSP, however it ends. */
class AgentSideConn extends PacketConn {
  constructor(
    link: RecordingLink,
    connectID: bigint,
    readonly address: string,
    opts?: PacketConnOptions,
  ) {
    super(link, connectID, AGENT_CLOSE, opts);
  }
}

function packetDriver(h: Harness, side: Side, opts: DriverOptions): Driver {
  const link = new RecordingLink();
  const connectID = side === 'server' ? 9n : 7n;
  const conn =
    side === 'server'
      ? new TunnelConn({ agentID: 'node-a', link, halfClose: opts.halfClose === true }, connectID, ADDRESS, opts)
      : new AgentSideConn(link, connectID, ADDRESS, opts);
  h.defer(() => conn.destroy());
  let failure: Error | undefined;
  conn.on('error', (err: Error) => (failure ??= err));
  const closed = new Promise<Error | undefined>((resolve) => conn.once('close', () => resolve(failure)));
  return {
    link,
    connectID,
    conn,
    closed,
    send: (data) => conn.write(data),
    end: (data) => (data === undefined ? conn.end() : conn.end(data)),
    fail: () => conn.destroy(new Error('read ECONNRESET')),
    arrived: () =>
      new Promise((resolve) => {
        const got: Buffer[] = [];
        conn.on('data', (c: Buffer) => got.push(c));
        conn.once('close', () => resolve({ data: Buffer.concat(got), ended: conn.readableEnded }));
      }),
  };
}

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

async function relayDriver(h: Harness, side: Side, opts: DriverOptions): Promise<Driver> {
  const { near, far } = await socketPair(h);
  const link = new RecordingLink();
  const connectID = side === 'server' ? 9n : 7n;
  const conn =
    side === 'server'
      ? new TunnelRelay({ agentID: 'node-a', link, halfClose: opts.halfClose === true }, connectID, ADDRESS, opts)
      : new EndpointConn(link, connectID, ADDRESS, opts);
  h.defer(() => conn.destroy());
  const closed = new Promise<Error | undefined>((resolve) => (conn.onClose = resolve));
  conn.attach(near);
  return {
    link,
    connectID,
    conn,
    closed,
    send: (data) => far.write(data),
    end: (data) => (data === undefined ? far.end() : far.end(data)),
    fail: () => far.resetAndDestroy(),
    arrived: () =>
      new Promise((resolve) => {
        const got: Buffer[] = [];
        far.on('data', (c: Buffer) => got.push(c));
        far.once('end', () => resolve({ data: Buffer.concat(got), ended: true }));
        far.once('close', () => resolve({ data: Buffer.concat(got), ended: false }));
      }),
  };
}

const DRIVERS: Record<Shape, (h: Harness, side: Side, opts: DriverOptions) => Driver | Promise<Driver>> = {
  PacketConn: packetDriver,
  SocketRelay: relayDriver,
};

/** Timers under test are unref'd: a ref'd one keeps the event loop alive while a row waits only for them. */
function keepAlive(h: Harness): void {
  const timer = setTimeout(() => {}, LIMIT.timeout);
  h.defer(() => clearTimeout(timer));
}

function total(link: RecordingLink): number {
  return link.data.reduce((n, d) => n + d.data.length, 0);
}

/** Settled or not, without waiting. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await tick();
  return done;
}

interface Row {
  name: string;
  /** Default both. */
  sides?: readonly Side[];
  opts?: DriverOptions;
  run(d: Driver): Promise<void>;
}

const ROWS: Row[] = [
  {
    name: 'what our end sends becomes DATA for the connectID, counted in bytesSent; nothing else is sent',
    async run(d) {
      d.send('to the peer ');
      d.send(Buffer.from([0, 1, 2, 255]));
      await waitFor('the DATA', () => total(d.link) === 16);
      assert.ok(d.link.data.every((p) => p.connectID === d.connectID));
      assert.deepEqual(d.link.sentBytes(), Buffer.concat([Buffer.from('to the peer '), Buffer.from([0, 1, 2, 255])]));
      assert.equal(d.conn.bytesSent, 16);
      assert.deepEqual(d.link.control, []);
    },
  },
  {
    name: 'a send larger than MAX_DATA_PAYLOAD goes out in pieces no larger, each only after the link took the previous',
    async run(d) {
      d.link.holdCallbacks = true;
      const big = Buffer.alloc(MAX_DATA_PAYLOAD + 1000);
      for (let i = 0; i < big.length; i += 4096) big[i] = (i / 4096) % 251;
      d.send(big);
      await waitFor('the first piece', () => d.link.data.length >= 1);
      for (let i = 0; i < 10; i++) await tick();
      assert.equal(d.link.data.length, 1, 'a second piece went out before the first was taken');
      for (let i = 0; i < 10_000 && total(d.link) < big.length; i++) {
        if (d.link.pendingCallbacks > 0) d.link.releaseOne();
        else await tick();
      }
      assert.ok(d.link.data.every((p) => p.connectID === d.connectID && p.data.length <= MAX_DATA_PAYLOAD));
      assert.ok(d.link.sentBytes().equals(big));
      assert.equal(d.conn.bytesSent, big.length);
      while (d.link.pendingCallbacks > 0) d.link.releaseOne();
    },
  },
  {
    name: "the peer's close: what it sent reaches our end in order, then the end; the agent answers one CLOSE_RSP, the server sends nothing; later closes change nothing",
    async run(d) {
      const arrived = d.arrived();
      d.conn.deliver(Buffer.from('last '));
      d.conn.deliver(Buffer.from('words'));
      d.conn.remoteClose();
      d.conn.deliver(Buffer.from('dropped'));
      assert.deepEqual(await arrived, { data: Buffer.from('last words'), ended: true });
      assert.equal(await d.closed, undefined);
      assert.equal(d.conn.bytesReceived, 10);
      assert.equal(d.conn.remoteClosed, true);
      const answer: KnownPacket[] = d.connectID === 7n ? [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }] : [];
      assert.deepEqual(d.link.control, answer);
      d.conn.remoteClose();
      d.conn.destroy(new Error('late'));
      assert.deepEqual(d.link.control, answer);
      assert.deepEqual(d.link.data, []);
    },
  },
  {
    name: "the peer's close before our end wrote: what our end sends after it is dropped, not sent",
    async run(d) {
      const arrived = d.arrived();
      d.conn.remoteClose();
      await arrived;
      d.send('too late');
      await d.closed;
      for (let i = 0; i < 5; i++) await tick();
      assert.deepEqual(d.link.data, []);
    },
  },
  {
    name: "our end (no half-close) is one CLOSE_REQ; the connection closes only at the agent's answer, and what it sent before arrives",
    sides: ['server'],
    async run(d) {
      const arrived = d.arrived();
      d.end('GET /');
      await waitFor('CLOSE_REQ', () => d.link.control.length === 1);
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_REQ', connectID: 9n }]);
      assert.equal(d.link.sentBytes().toString(), 'GET /');
      for (let i = 0; i < 10; i++) assert.equal(await settled(d.closed), false, "closed before the agent's CLOSE_RSP");
      d.conn.deliver(Buffer.from('last words'));
      d.conn.remoteClose();
      assert.deepEqual(await arrived, { data: Buffer.from('last words'), ended: true });
      assert.equal(await d.closed, undefined);
      assert.equal(d.link.control.length, 1);
    },
  },
  {
    name: 'our end failing is one CLOSE_REQ, without the error for an agent that cannot read it',
    sides: ['server'],
    async run(d) {
      d.fail();
      assert.ok((await d.closed) instanceof Error);
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_REQ', connectID: 9n }]);
    },
  },
  {
    name: 'our end failing is one CLOSE_REQ carrying why, for an agent that negotiated half-close',
    sides: ['server'],
    opts: { halfClose: true },
    async run(d) {
      d.fail();
      assert.ok((await d.closed) instanceof Error);
      const req = d.link.ofType('CLOSE_REQ');
      assert.equal(req.length, 1);
      assert.ok(req[0]!.type === 'CLOSE_REQ' && req[0]!.error !== undefined && /ECONNRESET/.test(req[0]!.error), inspect(req));
    },
  },
  {
    name: "the agent's close with an error ends the connection with it and cuts our end off; nothing is sent back",
    sides: ['server'],
    async run(d) {
      const arrived = d.arrived();
      const err = new ConnectionClosedError('agent node-a closed connection 9: connection reset by peer');
      d.conn.remoteClose(err);
      assert.equal(await d.closed, err);
      assert.equal((await arrived).ended, false);
      assert.deepEqual(d.link.control, []);
    },
  },
  {
    name: 'the close timer ends a connection whose agent never answers CLOSE_REQ (ConnectionClosedError)',
    sides: ['server'],
    opts: { closeTimeoutMs: 30 },
    async run(d) {
      void d.arrived();
      const started = Date.now();
      d.end();
      const err = await d.closed;
      assert.ok(Date.now() - started >= 25, `closed after ${Date.now() - started} ms`);
      assert.ok(err instanceof ConnectionClosedError);
      assert.equal(err.code, 'YT_ERR_CONNECTION_CLOSED');
      assert.equal(err.message, 'connection 9 did not finish closing within 30 ms; dropped');
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_REQ', connectID: 9n }]);
    },
  },
  {
    name: 'our end (no half-close): its last bytes, then one CLOSE_RSP without error; a clean close',
    sides: ['agent'],
    async run(d) {
      void d.arrived();
      d.end('bye');
      assert.equal(await d.closed, undefined);
      assert.deepEqual(d.link.data, [{ connectID: 7n, data: Buffer.from('bye') }]);
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
    },
  },
  {
    name: 'our end, then the peer closing, then a failure still make one CLOSE_RSP',
    sides: ['agent'],
    async run(d) {
      void d.arrived();
      d.end();
      d.conn.remoteClose();
      d.conn.destroy(new Error('late'));
      await d.closed;
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
    },
  },
  {
    name: 'our end failing is one CLOSE_RSP carrying why',
    sides: ['agent'],
    async run(d) {
      d.fail();
      assert.ok((await d.closed) instanceof Error);
      const rsp = d.link.ofType('CLOSE_RSP');
      assert.equal(rsp.length, 1);
      assert.ok(rsp[0]!.type === 'CLOSE_RSP' && /ECONNRESET/.test(rsp[0]!.error), inspect(rsp));
    },
  },
  {
    name: 'half-close: our end is CLOSE_WRITE; the peer still sends; its CLOSE_WRITE ends our end and one CLOSE_RSP follows',
    sides: ['agent'],
    opts: { halfClose: true },
    async run(d) {
      d.end('request');
      await waitFor('CLOSE_WRITE', () => d.link.ofType('CLOSE_WRITE').length === 1);
      assert.equal(d.link.sentBytes().toString(), 'request');
      assert.equal(await settled(d.closed), false, 'closed while the peer still sends');
      const arrived = d.arrived();
      d.conn.deliver(Buffer.from('answer'));
      d.conn.remoteEndWrite();
      assert.deepEqual(await arrived, { data: Buffer.from('answer'), ended: true });
      assert.equal(await d.closed, undefined);
      assert.deepEqual(d.link.control, [
        { type: 'CLOSE_WRITE', connectID: 7n },
        { type: 'CLOSE_RSP', connectID: 7n, error: '' },
      ]);
    },
  },
  {
    name: "half-close: our end is CLOSE_WRITE; the agent still sends; its CLOSE_WRITE ends our end and closes the connection, nothing more sent (the agent's CLOSE_RSP is owed)",
    sides: ['server'],
    opts: { halfClose: true },
    async run(d) {
      d.end('request');
      await waitFor('CLOSE_WRITE', () => d.link.ofType('CLOSE_WRITE').length === 1);
      assert.equal(d.link.sentBytes().toString(), 'request');
      const arrived = d.arrived();
      d.conn.deliver(Buffer.from('answer'));
      d.conn.remoteEndWrite();
      assert.deepEqual(await arrived, { data: Buffer.from('answer'), ended: true });
      assert.equal(await d.closed, undefined);
      assert.deepEqual(d.link.control, [{ type: 'CLOSE_WRITE', connectID: 9n }]);
    },
  },
  {
    name: "with flow control no more than the peer's window goes out until credit comes; a zero or negative grant changes nothing",
    opts: { flow: FLOW },
    async run(d) {
      d.send(Buffer.alloc(3 * FLOW.sendWindow, 1));
      await waitFor('a window of DATA', () => total(d.link) === FLOW.sendWindow);
      await new Promise((r) => setTimeout(r, 50));
      d.conn.grantCredit(0);
      d.conn.grantCredit(-5);
      await tick();
      assert.equal(total(d.link), FLOW.sendWindow, 'more than the window went out');
      d.conn.grantCredit(16 * 1024);
      await waitFor('the granted bytes', () => total(d.link) === FLOW.sendWindow + 16 * 1024);
      d.conn.grantCredit(2 * FLOW.sendWindow);
      await waitFor('the rest', () => total(d.link) === 3 * FLOW.sendWindow);
      assert.ok(d.link.sentBytes().equals(Buffer.alloc(3 * FLOW.sendWindow, 1)));
    },
  },
  {
    name: 'without flow control credit is ignored: everything goes out',
    async run(d) {
      d.conn.grantCredit(1024);
      d.send(Buffer.alloc(300 * 1024));
      await waitFor('all of it', () => total(d.link) === 300 * 1024);
    },
  },
  {
    name: 'with flow control what our end took is granted back (WINDOW_UPDATE for this connection), and the shared link is never paused',
    opts: { flow: FLOW },
    async run(d) {
      const arrived = d.arrived();
      for (let i = 0; i < 8; i++) d.conn.deliver(Buffer.alloc(FLOW.receiveWindow / 8, i));
      assert.equal(d.link.pauses, 0, 'the link keeps flowing for the other connections');
      await waitFor('a grant', () => d.link.ofType('WINDOW_UPDATE').length >= 1);
      const granted = d.link.control.reduce((n, p) => (p.type === 'WINDOW_UPDATE' && p.connectID === d.connectID ? n + Number(p.bytes) : n), 0);
      // At least a quarter window back once our end caught up (a reader that keeps up may be granted a wider window).
      assert.ok(granted >= FLOW.receiveWindow / 4, `granted ${granted}`);
      assert.equal(d.link.ofType('WINDOW_UPDATE').length, d.link.control.length, 'only WINDOW_UPDATEs were sent');
      assert.equal(d.link.pauses, 0);
      d.conn.remoteClose();
      assert.equal((await arrived).data.length, FLOW.receiveWindow);
    },
  },
];

for (const shape of ['PacketConn', 'SocketRelay'] as const) {
  for (const row of ROWS) {
    for (const side of row.sides ?? (['server', 'agent'] as const)) {
      test(`${shape}, ${side}: ${row.name}`, LIMIT, async (t) => {
        const h = harness(t);
        // A row awaiting what never comes fails by its timeout, not by the event loop running dry.
        keepAlive(h);
        const d = await DRIVERS[shape](h, side, row.opts ?? {});
        await row.run(d);
      });
    }
  }
}

// ====== PacketConn only: the Duplex (back-pressure, the shared link's pause, its coalescing) ======

function tunnelConn(
  h: Harness,
  link: RecordingLink,
  connectID = 9n,
  opts: { highWaterMark?: number; closeTimeoutMs?: number } = {},
  agent: { halfClose?: boolean } = {},
): TunnelConn {
  const backend = new Backend(
    { agentID: 'node-a', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:40000', certSubject: 'CN=tunnel-agent-client', ...agent },
    link,
  );
  const conn = new TunnelConn(backend, connectID, '10.0.0.5:10250', opts);
  h.defer(() => conn.destroy());
  return conn;
}

function endpointConn(h: Harness, link: RecordingLink, connectID = 7n, opts: { highWaterMark?: number; closeTimeoutMs?: number } = {}): AgentSideConn {
  const conn = new AgentSideConn(link, connectID, '10.0.0.5:10250', opts);
  h.defer(() => conn.destroy());
  return conn;
}

/** Resolves on 'close', whether or not an 'error' came first (events.once would reject). */
function closed(conn: PacketConn): Promise<void> {
  return new Promise((resolve) => conn.once('close', () => resolve()));
}

// --- writes ---------------------------------------------------------------

test('PacketConn only: back-pressure: while the link holds its callback, write() returns false, and drain follows once it is taken', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  link.holdCallbacks = true;
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 64 });
  let drains = 0;
  conn.on('drain', () => drains++);
  assert.equal(conn.write(Buffer.alloc(32)), true);
  assert.equal(conn.write(Buffer.alloc(32)), false);
  // The second chunk waits for the first one's callback.
  assert.equal(link.data.length, 1);
  link.releaseOne();
  assert.equal(link.data.length, 2);
  await tick();
  assert.equal(drains, 0, 'drain before the link took the last chunk');
  const drained = once(conn, 'drain');
  link.releaseOne();
  await drained;
  assert.equal(drains, 1);
  assert.equal(link.pendingCallbacks, 0);
});

test("PacketConn only: sendHighWaterMark bounds what writers may queue, apart from the receive side's highWaterMark", LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  link.holdCallbacks = true;
  const conn = new AgentSideConn(link, 8n, '10.0.0.5:10250', { highWaterMark: 256, sendHighWaterMark: 64 });
  h.defer(() => conn.destroy());
  assert.equal(conn.writableHighWaterMark, 64);
  assert.equal(conn.readableHighWaterMark, 256);
  assert.equal(conn.write(Buffer.alloc(32)), true);
  assert.equal(conn.write(Buffer.alloc(32)), false, 'writers wait once 64 bytes are queued');
  const plain = endpointConn(h, new RecordingLink(), 9n, { highWaterMark: 256 });
  assert.equal(plain.writableHighWaterMark, 256, 'without it, highWaterMark applies to both sides');
  link.releaseOne();
  link.releaseOne();
});

// --- reads and the shared link's pause ------------------------------------

test('PacketConn only: deliver() beyond the highWaterMark pauses the link exactly once; reading resumes it exactly once', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 16 });
  conn.deliver(Buffer.alloc(10, 'a'));
  assert.equal(link.pauses, 0);
  conn.deliver(Buffer.alloc(10, 'b'));
  assert.equal(link.pauses, 1);
  conn.deliver(Buffer.alloc(10, 'c'));
  conn.deliver(Buffer.alloc(10, 'd'));
  await tick();
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 0);
  assert.equal(conn.bytesReceived, 40);

  const read = conn.read() as Buffer;
  assert.equal(read.toString(), 'a'.repeat(10) + 'b'.repeat(10) + 'c'.repeat(10) + 'd'.repeat(10));
  assert.equal(link.resumes, 1);
  // More traffic below the mark and more reads change nothing.
  conn.deliver(Buffer.from('e'));
  assert.equal((conn.read() as Buffer).toString(), 'e');
  assert.equal(conn.read(), null);
  await tick();
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

test('PacketConn only: a flowing reader takes delivered data without ever pausing the link', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { highWaterMark: 16 });
  const got: Buffer[] = [];
  conn.on('data', (c: Buffer) => got.push(c));
  await tick(); // now flowing
  for (let i = 0; i < 10; i++) conn.deliver(Buffer.alloc(8, i));
  await tick();
  assert.equal(Buffer.concat(got).length, 80);
  assert.equal(link.pauses, 0);
  assert.equal(link.resumes, 0);
});

test('PacketConn only: destroy while paused releases the pause, once', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n, { highWaterMark: 4 });
  conn.deliver(Buffer.alloc(8));
  assert.equal(link.pauses, 1);
  conn.destroy();
  await closed(conn);
  assert.equal(link.resumes, 1);
  conn.deliver(Buffer.alloc(8));
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

test('PacketConn only: destroy after reading resumed the link does not resume it again', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { highWaterMark: 4 });
  conn.deliver(Buffer.alloc(8));
  conn.read();
  assert.equal(link.resumes, 1);
  conn.destroy();
  await closed(conn);
  assert.equal(link.pauses, 1);
  assert.equal(link.resumes, 1);
});

// --- TunnelConn: the server side ------------------------------------------

test('PacketConn only: TunnelConn end() twice, then destroy(), still sends one CLOSE_REQ', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = tunnelConn(h, link, 9n);
  conn.resume();
  conn.end();
  conn.end();
  await once(conn, 'finish');
  conn.destroy();
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_REQ', connectID: 9n }]);
});

test(
  'PacketConn only: TunnelConn destroyed with an error tells an agent that negotiated half-close why (its CLOSE_REQ carries the error); a normal end does not',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    const failed = tunnelConn(h, link, 9n, {}, { halfClose: true });
    failed.on('error', () => {});
    failed.destroy(new Error('read ECONNRESET'));
    await closed(failed);
    const normal = tunnelConn(h, link, 10n, {}, { halfClose: true });
    normal.destroy();
    await closed(normal);
    assert.deepEqual(link.control, [
      { type: 'CLOSE_REQ', connectID: 9n, error: 'read ECONNRESET' },
      { type: 'CLOSE_REQ', connectID: 10n },
    ]);
  },
);

test('PacketConn only: the close timer destroys a connection whose local reader never takes the end', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n, { closeTimeoutMs: 30 });
  keepAlive(h);
  conn.deliver(Buffer.from('unread'));
  conn.remoteClose();
  const [err] = (await once(conn, 'error')) as [unknown];
  assert.ok(err instanceof ConnectionClosedError);
  assert.equal(err.message, 'connection 7 did not finish closing within 30 ms; dropped');
  // The CLOSE_RSP answers the server's CLOSE_REQ: no error text, since the peer asked.
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
});

// --- the agent's close handshake on a PacketConn -----------------------------------------

test('PacketConn only: An agent-side PacketConn destroyed with an error sends one CLOSE_RSP carrying the error text', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n);
  const errors: unknown[] = [];
  conn.on('error', (e) => errors.push(e));
  conn.destroy(new Error('read tcp 10.0.0.5:10250: connection reset by peer'));
  conn.destroy(new Error('second'));
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: 'read tcp 10.0.0.5:10250: connection reset by peer' }]);
  assert.equal(errors.length, 1);
});

test('PacketConn only: An agent-side PacketConn destroyed without an error sends one CLOSE_RSP with no error text', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link, 7n);
  conn.destroy();
  await closed(conn);
  assert.deepEqual(link.control, [{ type: 'CLOSE_RSP', connectID: 7n, error: '' }]);
});

test('PacketConn only: connections sharing a link through a PauseGate pause it once and resume it when the last reader catches up', LIMIT, async (t) => {
  const h = harness(t);
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const link = new RecordingLink();
  link.pauseReceive = (holder: object) => gate.hold(holder);
  link.resumeReceive = (holder: object) => gate.release(holder);
  const a = endpointConn(h, link, 1n, { highWaterMark: 4 });
  const b = endpointConn(h, link, 2n, { highWaterMark: 4 });
  a.deliver(Buffer.alloc(8));
  a.deliver(Buffer.alloc(8));
  b.deliver(Buffer.alloc(8));
  assert.equal(pauses, 1);
  a.read();
  assert.equal(resumes, 0);
  b.read();
  assert.equal(resumes, 1);
  await tick();
  assert.equal(pauses, 1);
});

// --- flow control (proto/yurttunnel_ext.proto) ----------------------------

test(
  'PacketConn only: destroyed while a write waits for credit, every write is called back once: the waiting one and those queued behind it',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    const conn = new AgentSideConn(link, 5n, '10.0.0.5:10250', { flow: FLOW });
    h.defer(() => conn.destroy());
    conn.on('error', () => {});
    const calls = [0, 0, 0];
    conn.write(Buffer.alloc(100 * 1024, 1), () => calls[0]!++);
    conn.write(Buffer.alloc(10, 2), () => calls[1]!++);
    conn.write(Buffer.alloc(10, 3), () => calls[2]!++);
    await tick();
    assert.deepEqual(calls, [0, 0, 0], 'the first waits for credit, the others behind it');
    const gone = closed(conn);
    conn.destroy();
    await gone;
    // A writer that holds a pooled slab until its write calls back (the gRPC frontend) gets it back.
    assert.deepEqual(calls, [1, 1, 1]);
  },
);

test('PacketConn only: a delivered payload that views a pooled slab is copied: the reader gets its bytes after the slab went back', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = endpointConn(h, link);
  const pool = new BufferPool({ poison: true });
  const data = pool.take().subarray(0, 1000).fill(7);
  conn.deliver(data);
  releaseSlab(data);
  assert.equal(pool.outstanding, 0);
  const [chunk] = (await once(conn, 'data')) as [Buffer];
  assert.deepEqual(chunk, Buffer.alloc(1000, 7));
});

test('PacketConn only: with flow control a peer that ignores the window makes the link pause, as without it', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = new AgentSideConn(link, 7n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => conn.destroy());
  for (let i = 0; i < 9; i++) conn.deliver(Buffer.alloc(8 * 1024, i)); // one chunk past the window
  assert.equal(link.pauses, 1);
  conn.resume();
  await tick();
  assert.equal(link.resumes, 1);
});

test('PacketConn only: a reader that keeps up gets a wider window, up to MAX_AUTO_WINDOW; a slow one does not', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const fast = new AgentSideConn(link, 10n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => fast.destroy());
  fast.on('data', () => {});
  let granted = 0;
  // Feed window after window as grants come back; a flowing reader empties the buffer each time.
  for (let round = 0; round < 200 && granted < 20 * 1024 * 1024; round++) {
    fast.deliver(Buffer.alloc(16 * 1024));
    await tick();
    granted = link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' && p.connectID === 10n ? Number(p.bytes) : 0), 0);
  }
  const delivered = fast.bytesReceived;
  assert.ok(granted > delivered, `widened: granted ${granted} for ${delivered} consumed`);
  assert.ok(granted - delivered <= MAX_AUTO_WINDOW - FLOW.receiveWindow, 'never past MAX_AUTO_WINDOW');

  const slow = new AgentSideConn(link, 11n, '10.0.0.5:10250', { flow: FLOW });
  h.defer(() => slow.destroy());
  for (let i = 0; i < 4; i++) slow.deliver(Buffer.alloc(8 * 1024));
  slow.read(16 * 1024); // a little is read; the buffer is never empty
  await tick();
  const slowGrants = link.control.filter((p) => p.type === 'WINDOW_UPDATE' && p.connectID === 11n);
  assert.ok(
    slowGrants.every((p) => p.type === 'WINDOW_UPDATE' && Number(p.bytes) <= 16 * 1024),
    'no widening for a reader that lags',
  );
});

test(
  'PacketConn only: a window narrowed for a slow reader never leaves both sides waiting: a peer that used all its credit gets more as the reader takes',
  { timeout: 15_000 },
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    const announced = 128 * 1024;
    // A short measured round trip: the window narrows as soon as it takes over 500 ms to drain.
    const conn = new AgentSideConn(link, 12n, '10.0.0.5:10250', { flow: { sendWindow: announced, receiveWindow: announced, roundTripMs: () => 1 } });
    h.defer(() => conn.destroy());
    const granted = (): number => link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' && p.connectID === 12n ? Number(p.bytes) : 0), 0);
    let sent = 0;
    let taken = 0;
    const takenAt: Array<{ at: number; taken: number }> = [];
    const start = performance.now();
    // The peer sends whatever its credit allows every 10 ms; the reader takes 16 KiB every 100 ms (160 KiB/s).
    for (let step = 0; step < 300; step++) {
      const credit = announced + granted() - sent;
      if (credit > 0) {
        const n = Math.min(16 * 1024, credit);
        conn.deliver(Buffer.alloc(n, 1));
        sent += n;
      }
      if (step % 10 === 0) {
        const chunk = conn.read(Math.min(16 * 1024, conn.readableLength));
        taken += chunk?.length ?? 0;
        takenAt.push({ at: performance.now() - start, taken });
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const lastSecond = takenAt.filter((s) => s.at >= takenAt.at(-1)!.at - 1000);
    assert.ok(lastSecond.at(-1)!.taken - lastSecond[0]!.taken >= 64 * 1024, `the reader kept getting bytes: ${JSON.stringify(takenAt.slice(-12))}`);
    assert.ok(sent - taken <= announced, `the peer kept to the window: ${sent - taken} in flight`);
  },
);

// --- what waits for a reader that is behind (coalescer.ts) ---------------

const gc = exposedGc();

/** The JS heap and ArrayBuffer memory after a full GC. */
function heldMemory(): number {
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

test('PacketConn only: 1-byte payloads behind a reader that does not read are pushed together: they cost about their bytes', LIMIT, async (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const conn = new AgentSideConn(link, 13n, '10.0.0.5:10250', { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 * 1024 } });
  h.defer(() => conn.destroy());
  const count = 32 * 1024;
  // Each a view of a 64 KiB read of its own, as from HTTP/2.
  const reads = Array.from({ length: 16 }, (_, i) => Buffer.alloc(64 * 1024, i + 1));
  const expected = Buffer.alloc(count);
  for (let i = 0; i < count; i++) expected[i] = reads[i % 16]![i % 4096]!;
  conn.deliver(reads[0]!.subarray(0, 1));
  const before = heldMemory();
  for (let i = 1; i < count; i++) conn.deliver(reads[i % 16]!.subarray(i % 4096, (i % 4096) + 1));
  const held = heldMemory() - before;
  // One pushed chunk per payload, each a Buffer and an ArrayBuffer of its own, kept ~7 MB.
  assert.ok(held < 4 * count + 512 * 1024, `${count} waiting 1-byte payloads keep ${held} bytes`);
  assert.equal(conn.readableLength > 0, true);
  assert.equal(link.pauses, 0);
  const got = conn.read() as Buffer;
  assert.ok(got.equals(expected), 'every byte, in order');
  assert.equal(conn.read(), null);
});

/** Readers that stop and go at odd moments; each resolves with all it read up to the end. */
const readers: Record<string, (conn: PacketConn, rand: () => number) => Promise<Buffer>> = {
  "'data', paused and resumed": (conn, rand) => {
    const got: Buffer[] = [];
    conn.on('data', (c: Buffer) => {
      got.push(c);
      if (rand() < 0.1) {
        conn.pause();
        setTimeout(() => conn.resume(), Math.floor(rand() * 3));
      }
    });
    return once(conn, 'end').then(() => Buffer.concat(got));
  },
  'pipe() into a writer that is slow at times': async (conn, rand) => {
    const got: Buffer[] = [];
    const sink = new Writable({
      highWaterMark: 1024,
      write(chunk: Buffer, _enc, cb) {
        got.push(chunk);
        if (rand() < 0.2) setTimeout(cb, Math.floor(rand() * 3));
        else cb();
      },
    });
    await pipeline(conn, sink);
    return Buffer.concat(got);
  },
  "'readable' and read(n) of odd sizes": (conn, rand) => {
    const got: Buffer[] = [];
    const take = (): void => {
      for (;;) {
        const c = conn.read(1 + Math.floor(rand() * 5000));
        if (c === null) break;
        got.push(c);
      }
    };
    conn.on('readable', () => {
      if (rand() < 0.3) setTimeout(take, 1);
      else take();
    });
    return once(conn, 'end').then(() => Buffer.concat(got));
  },
  'async iteration with pauses': async (conn, rand) => {
    const got: Buffer[] = [];
    for await (const c of conn) {
      got.push(c as Buffer);
      if (rand() < 0.1) await new Promise((r) => setTimeout(r, 1));
    }
    return Buffer.concat(got);
  },
};

for (const [name, read] of Object.entries(readers)) {
  for (const flow of [false, true]) {
    test(`PacketConn only: ${name}${flow ? ', with flow control' : ''}: mixed small and large payloads arrive in order, then the end`, LIMIT, async (t) => {
      const h = harness(t);
      const rand = prng(name.length * (flow ? 2 : 1));
      const next = payloads(rand);
      const link = new RecordingLink();
      const conn = new AgentSideConn(link, 14n, '10.0.0.5:10250', flow ? { flow: { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 * 1024 } } : {});
      h.defer(() => conn.destroy());
      const all = read(conn, rand);
      const expected: Buffer[] = [];
      for (let step = 0; step < 300; step++) {
        const burst = Math.floor(rand() * 12);
        for (let i = 0; i < burst; i++) {
          const p = next();
          expected.push(p);
          conn.deliver(p);
        }
        if (rand() < 0.6) await tick();
      }
      conn.remoteClose();
      const got = await all;
      const want = Buffer.concat(expected);
      assert.equal(got.length, want.length);
      assert.ok(got.equals(want), 'the bytes in order');
    });
  }
}

test(
  'PacketConn only: with flow control, a peer that keeps to its window and sends 1-byte payloads to a reader that stops and goes is never stuck',
  LIMIT,
  async (t) => {
    const h = harness(t);
    const link = new RecordingLink();
    // Held chunks (16 KiB) are the whole window: only a grant after the read that took one lets the peer go on.
    const announced = 16 * 1024;
    const conn = new AgentSideConn(link, 15n, '10.0.0.5:10250', { flow: { sendWindow: announced, receiveWindow: announced } });
    h.defer(() => conn.destroy());
    const rand = prng(7);
    let consumed = 0;
    let next = 0;
    let inOrder = true;
    conn.on('data', (c: Buffer) => {
      for (const b of c) inOrder &&= b === next++ % 251;
      consumed += c.length;
    });
    const granted = (): number => link.control.reduce((n, p) => n + (p.type === 'WINDOW_UPDATE' ? Number(p.bytes) : 0), 0);
    const total = 512 * 1024;
    let sent = 0;
    const deadline = Date.now() + 5000;
    for (let round = 0; round < 100_000 && consumed < total && Date.now() < deadline; round++) {
      const r = rand();
      if (r < 0.2) conn.pause();
      else if (r < 0.6) conn.resume();
      const credit = Math.min(announced + granted() - sent, total - sent);
      for (let i = 0; i < credit; i++) conn.deliver(Buffer.from([sent++ % 251]));
      await tick();
    }
    assert.equal(consumed, total, `the reader got ${consumed} of ${total}, the peer was granted ${announced + granted()}`);
    assert.ok(inOrder);
    assert.equal(link.pauses, 0, 'the peer never went past its window');
  },
);

// ====== ConnTable: a link's connections by connectID, with tombstones ======

test('ConnTable: remove before the peer closed leaves a tombstone; after, none', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const open = endpointConn(h, link, 1n);
  const peerClosed = endpointConn(h, link, 2n);
  table.add(open);
  table.add(peerClosed);
  assert.equal(table.size, 2);
  assert.equal(table.get(1n), open);

  assert.equal(table.remove(open), true);
  assert.equal(table.get(1n), undefined);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.isTombstoned(1n), true);

  peerClosed.remoteClose();
  assert.equal(table.remove(peerClosed), true);
  assert.equal(table.isTombstoned(2n), false);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.size, 0);

  assert.equal(table.remove(open), false, 'second remove');
  assert.equal(table.tombstoneCount, 1);
});

test('ConnTable: remove() of a connection that is no longer the entry for its ID does nothing', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const old = endpointConn(h, link, 5n);
  const current = endpointConn(h, link, 5n);
  table.add(old);
  table.add(current);
  assert.equal(table.remove(old), false);
  assert.equal(table.get(5n), current);
  assert.equal(table.tombstoneCount, 0);
});

test('ConnTable: takeTombstone() consumes the tombstone once', LIMIT, (t) => {
  const h = harness(t);
  const table = new ConnTable<AgentSideConn>();
  table.add(endpointConn(h, new RecordingLink(), 3n));
  table.remove(table.get(3n)!);
  assert.equal(table.takeTombstone(3n), true);
  assert.equal(table.takeTombstone(3n), false);
  assert.equal(table.isTombstoned(3n), false);
  assert.equal(table.takeTombstone(99n), false);
});

test('ConnTable: tombstones expire TOMBSTONE_MS after removal, by sweep() or on lookup', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const a = endpointConn(h, link, 1n);
  const b = endpointConn(h, link, 2n);
  table.add(a);
  table.add(b);
  table.remove(a, 1000);
  table.remove(b, 2000);
  assert.equal(table.tombstoneCount, 2);

  table.sweep(1000 + TOMBSTONE_MS);
  assert.equal(table.tombstoneCount, 2, 'expired at the exact deadline');
  table.sweep(1000 + TOMBSTONE_MS + 1);
  assert.equal(table.tombstoneCount, 1);
  assert.equal(table.isTombstoned(1n, 1000 + TOMBSTONE_MS + 1), false);

  assert.equal(table.isTombstoned(2n, 2000 + TOMBSTONE_MS), true);
  assert.equal(table.isTombstoned(2n, 2000 + TOMBSTONE_MS + 1), false);
  assert.equal(table.tombstoneCount, 0, 'an expired tombstone found on lookup is forgotten');
});

test('ConnTable: add() over a tombstone clears it; takeAll() empties everything', LIMIT, (t) => {
  const h = harness(t);
  const link = new RecordingLink();
  const table = new ConnTable<AgentSideConn>();
  const a = endpointConn(h, link, 1n);
  table.add(a);
  table.remove(a);
  const again = endpointConn(h, link, 1n);
  table.add(again);
  assert.equal(table.isTombstoned(1n), false);
  const b = endpointConn(h, link, 2n);
  table.add(b);
  table.remove(b);
  assert.deepEqual(table.takeAll(), [again]);
  assert.equal(table.size, 0);
  assert.equal(table.tombstoneCount, 0);
});

// ====== SocketRelay only: the socket (attach, coalescing into socket writes, its buffers) ======

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

test('SocketRelay only: DATA delivered before the socket is attached is written first, then what follows', LIMIT, async (t) => {
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

test(
  'SocketRelay only: EndpointConn: small payloads that wait behind a target that does not read are written together, in memory of their own',
  LIMIT,
  async (t) => {
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
  },
);

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
  test(`SocketRelay only: held bytes go out once the socket has written what it had, with no more DATA to push them: ${when}`, LIMIT, async (t) => {
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
      `SocketRelay only: ${name}: mixed small and large payloads, some before the socket, a reader that stops and goes at odd moments: every byte in order, then the end (seed ${seed})`,
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

test('SocketRelay only: held before the socket is attached, with the end: written in order, then the end', LIMIT, async (t) => {
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

test('SocketRelay only: attach() with bytes read during the dial and a socket whose EOF came then: the bytes go first, then the end', LIMIT, async (t) => {
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

test(
  'SocketRelay only: with flow control: a slow reader whose peer keeps to the window never pauses the shared link; a byte past the window does',
  LIMIT,
  async (t) => {
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
  },
);

for (const highWaterMark of [64 * 1024, 1024]) {
  test(
    `SocketRelay only: without flow control (highWaterMark ${highWaterMark}): a caller that reads nothing pauses the shared link once; its reading resumes it once`,
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

test(
  'SocketRelay only: TunnelRelay on a suspended link: its last bytes wait for the link however many close timeouts pass, then it closes cleanly',
  LIMIT,
  async (t) => {
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
  },
);

test(
  "SocketRelay only: TunnelRelay on a suspended link: waiting for the agent's CLOSE_RSP outlasts the close timeout; the answer after the resume closes it cleanly",
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

test('SocketRelay only: a finished relay leaves none of its handlers on the socket, only a listener that takes a late error', LIMIT, async (t) => {
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
