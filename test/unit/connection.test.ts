// A tunnelled connection's behaviour as one table of cases, each run against
// both shapes of the connection core (conn-core.ts): a PacketConn (a Duplex
// for callers in this process) and a SocketRelay (joined straight to a real
// loopback socket), on the server's side (TunnelConn, TunnelRelay: ends with
// CLOSE_REQ) and the agent's (owes exactly one CLOSE_RSP). A small driver per
// shape says how our end writes, ends, fails and reads; the link is a
// recording fake, so every packet and every pause/resume is counted.
// What only one shape has (the Duplex's back-pressure, the relay's socket
// coalescing) is in packet-conn.test.ts and socket-relay.test.ts.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { inspect } from 'node:util';
import { setImmediate as tick } from 'node:timers/promises';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import { AGENT_CLOSE } from '../../pkg/mux/close-handshake.js';
import { MAX_DATA_PAYLOAD, PacketConn, type PacketConnOptions } from '../../pkg/mux/packet-conn.js';
import type { SocketRelay } from '../../pkg/mux/socket-relay.js';
import { ConnectionClosedError } from '../../pkg/protocol/errors.js';
import type { KnownPacket } from '../../pkg/protocol/packet.js';
import { TunnelConn } from '../../pkg/tunnel/tunnel-conn.js';
import { TunnelRelay } from '../../pkg/tunnel/tunnel-relay.js';
import { harness, type Harness } from '../support/harness.js';
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
  readonly address = ADDRESS;
  constructor(link: RecordingLink, connectID: bigint, opts?: PacketConnOptions) {
    super(link, connectID, AGENT_CLOSE, opts);
  }
}

function packetDriver(h: Harness, side: Side, opts: DriverOptions): Driver {
  const link = new RecordingLink();
  const connectID = side === 'server' ? 9n : 7n;
  const conn =
    side === 'server'
      ? new TunnelConn({ agentID: 'node-a', link, halfClose: opts.halfClose === true }, connectID, ADDRESS, opts)
      : new AgentSideConn(link, connectID, opts);
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

/** Two ends of one loopback TCP connection: `near` is joined to the relay, `far` is our end. */
async function socketPair(h: Harness): Promise<{ near: Socket; far: Socket }> {
  const server = createServer({ allowHalfOpen: true });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(() => new Promise<void>((r) => server.close(() => r())));
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const near = connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, allowHalfOpen: true, noDelay: true });
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
