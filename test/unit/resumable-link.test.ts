// A session link that outlives its transport (pkg/mux/resumable-link.ts):
// across cuts that lose whatever was in flight, every packet arrives once and
// in order; acknowledgements ride on WINDOW_UPDATE and keep what is held small;
// writers wait while no transport is attached; nothing a dropped transport
// still delivers is taken; and real connections (a PacketConn, and the
// SocketRelays the agent and the CONNECT path join to their sockets; flow
// control, half-close) carry bytes exactly through blips.

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { test } from 'node:test';
import { setImmediate as tick, setTimeout as sleep } from 'node:timers/promises';
import { EndpointConn } from '../../pkg/agent/endpoint-conn.js';
import type { MuxConn } from '../../pkg/mux/mux-conn.js';
import { SERVER_CLOSE } from '../../pkg/mux/close-handshake.js';
import { PacketConn, type PacketConnOptions } from '../../pkg/mux/packet-conn.js';
import type { PacketLink } from '../../pkg/mux/packet-link.js';
import { ResumableLink, type ResumableLinkOptions } from '../../pkg/mux/resumable-link.js';
import { ConnectionClosedError, ResumeError } from '../../pkg/protocol/errors.js';
import type { Packet } from '../../pkg/protocol/packet.js';
import { TunnelRelay } from '../../pkg/tunnel/tunnel-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { memoryLinkPair, type MemoryLinkPair } from '../support/memory-link.js';
import { PacketWire } from '../support/packet-wire.js';

const LIMIT = { timeout: 60_000 };

/**
 * The link's acknowledgement timer is unref'd (a process has its sockets to
 * live on); a test of it alone holds the loop open while it waits.
 */
function keepAlive(h: { defer(fn: () => unknown): void }): void {
  const timer = setInterval(() => {}, 1000);
  h.defer(() => clearInterval(timer));
}

/** Both ends of one session over a wire that the test can cut and replace. */
class Session {
  readonly a: ResumableLink;
  readonly b: ResumableLink;
  wire: PacketWire;
  readonly toA: Packet[] = [];
  readonly toB: Packet[] = [];
  readonly broken: ResumeError[] = [];
  blips = 0;

  constructor(opts: Partial<ResumableLinkOptions> = {}, onA?: (p: Packet) => void, onB?: (p: Packet) => void) {
    const common = { onBroken: (err: ResumeError) => this.broken.push(err), ...opts };
    this.a = new ResumableLink({ ...common, onPacket: onA ?? ((p) => this.toA.push(p)) });
    this.b = new ResumableLink({ ...common, onPacket: onB ?? ((p) => this.toB.push(p)) });
    this.wire = this.newWire();
    this.a.attach(this.wire.a, 0);
    this.b.attach(this.wire.b, 0);
  }

  private newWire(): PacketWire {
    return new PacketWire(
      (from, p) => this.a.receive(from, p),
      (from, p) => this.b.receive(from, p),
    );
  }

  /** The call drops: in flight is lost, both ends notice. */
  blip(): void {
    this.blips++;
    this.wire.cut();
    this.a.detach();
    this.b.detach();
  }

  /** A new call: each end tells the other its count, and both go on. */
  resume(): void {
    this.wire = this.newWire();
    const aReceived = this.a.received;
    const bReceived = this.b.received;
    this.a.attach(this.wire.a, bReceived);
    this.b.attach(this.wire.b, aReceived);
  }

  close(): void {
    this.a.close();
    this.b.close();
  }
}

/** Sends `n` numbered items from `link`: every fifth a control packet, the rest DATA, honouring back-pressure. */
async function sendItems(link: ResumableLink, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    if (i % 5 === 0) {
      link.sendControl({ type: 'DIAL_CLS', random: BigInt(i + 1) });
      continue;
    }
    const payload = Buffer.alloc(4 + (i % 7) * 100);
    payload.writeUInt32BE(i);
    await new Promise<void>((resolve, reject) => link.sendData(1n, payload, (err) => (err ? reject(err) : resolve())));
  }
}

function itemsOf(packets: Packet[]): number[] {
  return packets.map((p) => {
    if (p.type === 'DATA') return p.data.readUInt32BE(0);
    if (p.type === 'DIAL_CLS') return Number(p.random) - 1;
    throw new Error(`unexpected ${p.type}`);
  });
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

/** A tiny seeded random source, so a failure can be run again. */
function seeded(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2 ** 31;
    return s / 2 ** 31;
  };
}

test('through random cuts, each end receives every packet once and in order, and ends up holding nothing', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  for (const seed of [1, 2, 3, 4, 5]) {
    const random = seeded(seed);
    const s = new Session();
    h.defer(() => s.close());
    const N = 3000;
    let done = false;
    const traffic = Promise.all([sendItems(s.a, N), sendItems(s.b, N)]).then(() => (done = true));
    let lost = 0;
    // Cut at random moments while traffic flows, stay down a few turns (sends go on meanwhile), come back.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the receiver's callback sets done
    for (let round = 0; round < 200 && !done; round++) {
      for (let k = Math.floor(random() * 30); k > 0; k--) await tick();
      if (random() < 0.3) {
        s.blip();
        lost += s.wire.lost;
        for (let k = Math.floor(random() * 10); k > 0; k--) await tick();
        s.resume();
      }
    }
    await traffic;
    const deadline = Date.now() + 10_000;
    while ((s.toA.length < N || s.toB.length < N) && Date.now() < deadline) await sleep(5);
    assert.deepEqual(itemsOf(s.toB), range(N), `seed ${seed}: a → b`);
    assert.deepEqual(itemsOf(s.toA), range(N), `seed ${seed}: b → a`);
    assert.ok(s.blips > 3 && lost > 0, `seed ${seed}: the cuts lost packets in flight (${s.blips} cuts, ${lost} lost)`);
    assert.ok(s.a.resentPackets > 0 && s.b.resentPackets > 0, `seed ${seed}: lost packets were resent`);
    // Once quiet, an acknowledgement of its own lets each end drop what it kept.
    while ((s.a.unacknowledged.packets > 0 || s.b.unacknowledged.packets > 0) && Date.now() < deadline) await sleep(5);
    assert.deepEqual(
      [s.a.unacknowledged, s.b.unacknowledged],
      [
        { packets: 0, dataBytes: 0 },
        { packets: 0, dataBytes: 0 },
      ],
    );
    assert.deepEqual(s.broken, []);
    s.close();
  }
});

test('acknowledgements ride on WINDOW_UPDATE; one of our own (connectID 0) is neither numbered nor handed on', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session({ ackDelayMs: 10, ackEveryPackets: 1000 });
  h.defer(() => s.close());
  for (let i = 0; i < 10; i++) s.a.sendControl({ type: 'CLOSE_WRITE', connectID: BigInt(i + 1) });
  await waitUntil(() => s.toB.length === 10);
  assert.equal(s.a.unacknowledged.packets, 10, 'nothing acknowledged yet');
  // b's next WINDOW_UPDATE carries its count.
  s.b.sendControl({ type: 'WINDOW_UPDATE', connectID: 3n, bytes: 100n });
  await waitUntil(() => s.toA.length === 1);
  assert.deepEqual(s.toA[0], { type: 'WINDOW_UPDATE', connectID: 3n, bytes: 100n, received: 10n });
  assert.equal(s.a.unacknowledged.packets, 0);
  assert.equal(s.wire.b.sent.get('ACK'), undefined, 'no acknowledgement alone was needed');
  // a has received one packet and sends nothing: within the delay, one acknowledgement alone.
  await waitUntil(() => s.b.unacknowledged.packets === 0);
  assert.equal(s.wire.a.sent.get('ACK'), 1);
  assert.equal(s.a.received, 1, 'the WINDOW_UPDATE with credit is numbered');
  assert.equal(s.b.received, 10, 'the acknowledgement alone is not');
  assert.equal(s.toB.length, 10, 'nor handed on');
  assert.throws(() => s.a.sendControl({ type: 'WINDOW_UPDATE', connectID: 0n, bytes: 5n }), TypeError, "connectID 0 is the link's own");
});

test('many packets or bytes are acknowledged at once, not after the delay', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session({ ackDelayMs: 60_000, ackEveryPackets: 8, ackEveryBytes: 10_000 });
  h.defer(() => s.close());
  for (let i = 0; i < 16; i++) s.a.sendControl({ type: 'CLOSE_WRITE', connectID: BigInt(i + 1) });
  await waitUntil(() => s.a.unacknowledged.packets === 0);
  assert.equal(s.wire.b.sent.get('ACK'), 2);
  await new Promise<void>((resolve) => s.a.sendData(1n, Buffer.alloc(20_000), () => resolve()));
  await waitUntil(() => s.a.unacknowledged.packets === 0);
  assert.equal(s.wire.b.sent.get('ACK'), 3);
});

test('a WINDOW_UPDATE that handling a packet sends carries the acknowledgement: none goes alone', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  // b grants credit back for each DATA as it takes it (a relay whose socket took the bytes at once),
  // and would acknowledge after every packet: the grant already did.
  const grantOnB = (p: Packet): void => {
    if (p.type === 'DATA') s.b.sendControl({ type: 'WINDOW_UPDATE', connectID: p.connectID, bytes: BigInt(p.data.length) });
  };
  const s: Session = new Session({ ackEveryPackets: 1, ackEveryBytes: 1, ackDelayMs: 5 }, undefined, grantOnB);
  h.defer(() => s.close());
  for (let i = 0; i < 4; i++) await new Promise<void>((resolve) => s.a.sendData(1n, Buffer.alloc(100), () => resolve()));
  await waitUntil(() => s.a.unacknowledged.packets === 0 && s.b.unacknowledged.packets === 0);
  assert.equal(s.wire.b.sent.get('WINDOW_UPDATE'), 4);
  assert.equal(s.wire.b.sent.get('ACK'), undefined, 'each acknowledgement rode on a grant');
  assert.equal(s.b.received, 4);
});

test('while no transport is attached, writers wait; after the resume they go on and nothing is lost', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session();
  h.defer(() => s.close());
  s.blip();
  let called = 0;
  s.a.sendData(1n, Buffer.from('during the blip'), () => called++);
  s.a.sendControl({ type: 'CLOSE_WRITE', connectID: 1n });
  await sleep(20);
  assert.equal(called, 0, 'the writer is held, as by a full stream');
  s.resume();
  await waitUntil(() => s.toB.length === 2);
  assert.equal(called, 1);
  assert.equal((s.toB[0] as { data: Buffer }).data.toString(), 'during the blip');
  assert.equal(s.toB[1]!.type, 'CLOSE_WRITE');
});

test('a dropped transport that still delivers after the resume is not heard; its packets arrive once, resent', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session();
  h.defer(() => s.close());
  // A silent blip: b goes on to a new transport while the old one still carries a's last packet.
  s.a.sendControl({ type: 'DIAL_CLS', random: 42n });
  const oldWire = s.wire;
  s.a.detach();
  s.b.detach();
  s.resume();
  await waitUntil(() => s.toB.length === 1);
  await sleep(20); // the old wire had its turns: had it been heard, the packet would be there twice
  assert.equal(oldWire.isCut, false);
  assert.deepEqual(s.toB, [{ type: 'DIAL_CLS', random: 42n }]);
  assert.equal(s.b.received, 1);
  oldWire.cut();
});

test('a count the peer cannot have refuses the resume; an acknowledgement ahead of what was sent breaks the session once', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session({ ackDelayMs: 5 });
  h.defer(() => s.close());
  for (let i = 0; i < 3; i++) s.a.sendControl({ type: 'CLOSE_WRITE', connectID: BigInt(i + 1) });
  await waitUntil(() => s.a.unacknowledged.packets === 0);
  s.blip();
  const wire = new PacketWire(
    () => {},
    () => {},
  );
  assert.deepEqual(
    [2, 3, 4].map((n) => s.a.canResume(n)),
    [false, true, false],
    'what attach would accept, asked first',
  );
  assert.throws(() => s.a.attach(wire.a, 2), { name: 'ResumeError', code: 'YT_ERR_RESUME_BAD_COUNT' }, 'below what b acknowledged');
  assert.throws(() => s.a.attach(wire.a, 4), { name: 'ResumeError', code: 'YT_ERR_RESUME_BAD_COUNT' }, 'beyond what a sent');
  s.resume();
  s.a.receive(s.wire.a, { type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: 99n });
  s.a.receive(s.wire.a, { type: 'WINDOW_UPDATE', connectID: 0n, bytes: 0n, received: 100n });
  assert.equal(s.broken.length, 1);
  assert.equal(s.broken[0]!.code, 'YT_ERR_RESUME_ACK_AHEAD');
  assert.equal(s.broken[0]!.message, 'the peer acknowledged 99 packets, but only 3 were sent');
});

test('past maxDataBytes unacknowledged a writer waits for the acknowledgement; control packets past their limit break the session', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session({ maxDataBytes: 1000, maxControlPackets: 5, ackDelayMs: 30 });
  h.defer(() => s.close());
  const started = performance.now();
  await new Promise<void>((resolve) => s.a.sendData(1n, Buffer.alloc(1500), () => resolve()));
  assert.ok(performance.now() - started >= 20, 'the callback waited for the acknowledgement');
  assert.equal(s.a.unacknowledged.packets, 0);
  s.blip();
  for (let i = 0; i < 5; i++) assert.equal(s.a.sendControl({ type: 'CLOSE_WRITE', connectID: 1n }), true);
  assert.equal(s.a.sendControl({ type: 'CLOSE_WRITE', connectID: 1n }), false);
  assert.equal(s.broken.length, 1);
  assert.equal(s.broken[0]!.code, 'YT_ERR_RESUME_BUFFER_FULL');
});

test('who paused receiving is paused again on the next transport; close fails held writers', LIMIT, async (t) => {
  const h = harness(t);
  keepAlive(h);
  const s = new Session();
  h.defer(() => s.close());
  const holder = {};
  s.b.pauseReceive(holder);
  assert.ok(s.wire.b.pausedBy.has(holder));
  s.blip();
  s.resume();
  assert.ok(s.wire.b.pausedBy.has(holder), 'the new transport is paused for the same holder');
  s.b.resumeReceive(holder);
  assert.equal(s.wire.b.pausedBy.size, 0);
  s.blip();
  const err = await new Promise<Error | null | undefined>((resolve) => {
    s.a.sendData(1n, Buffer.from('x'), resolve);
    s.a.close(new ConnectionClosedError('session over'));
  });
  assert.equal(err?.message, 'session over');
  assert.equal(s.a.sendControl({ type: 'DRAIN' }), false);
});

// ---------------------------------------------------------------- real connections

/** The server's side as TunnelConn is: CLOSE_REQ when it ends first, nothing when the agent did. */
class ServerSideConn extends PacketConn {
  constructor(link: PacketLink, connectID: bigint, opts?: PacketConnOptions) {
    super(link, connectID, SERVER_CLOSE, opts);
  }
}

/** What Tunnel.handlePacket and ServerConnection.onPacket do for one connection. */
function dispatch(conn: () => MuxConn): (p: Packet) => void {
  return (p) => {
    const c = conn();
    switch (p.type) {
      case 'DATA':
        c.deliver(p.data);
        return;
      case 'WINDOW_UPDATE':
        c.grantCredit(Number(p.bytes));
        return;
      case 'CLOSE_WRITE':
        c.remoteEndWrite();
        return;
      case 'CLOSE_REQ':
      case 'CLOSE_RSP':
        c.remoteClose();
        return;
      default:
        throw new Error(`unexpected ${p.type}`);
    }
  };
}

function sha(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex');
}

/** Writes `data` in pieces, then ends; reads everything to the end. */
async function exchange(conn: PacketConn, data: Buffer): Promise<Buffer> {
  const chunks: Buffer[] = [];
  conn.on('data', (c: Buffer) => chunks.push(c));
  const ended = once(conn, 'end');
  for (let off = 0; off < data.length; off += 48 * 1024) {
    if (!conn.write(data.subarray(off, off + 48 * 1024))) await once(conn, 'drain');
  }
  conn.end();
  await ended;
  return Buffer.concat(chunks);
}

/** The same through a socket: the far end of one joined to a SocketRelay (the relay's target or caller). */
async function exchangeSocket(socket: Socket, data: Buffer): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on('data', (c: Buffer) => chunks.push(c));
  const ended = once(socket, 'end');
  for (let off = 0; off < data.length; off += 48 * 1024) {
    if (!socket.write(data.subarray(off, off + 48 * 1024))) await once(socket, 'drain');
  }
  socket.end();
  await ended;
  return Buffer.concat(chunks);
}

/** Two ends of one loopback TCP connection, both half-open: `near` is joined to a relay, `far` plays its target or caller. */
async function socketPair(h: Harness): Promise<{ near: Socket; far: Socket }> {
  const server = createServer({ allowHalfOpen: true });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const near = connect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, allowHalfOpen: true, noDelay: true });
  const [[far]] = await Promise.all([accepted, once(near, 'connect')]);
  server.close();
  h.defer(() => (near.destroy(), far.destroy()));
  return { near, far };
}

/** Resolves with the error a relay ended with (undefined for a clean close). */
function relayEnded(relay: EndpointConn | TunnelRelay): Promise<Error | undefined> {
  return new Promise((resolve) => {
    relay.onClose = resolve;
  });
}

test(
  "8 MiB each way through real connections (a PacketConn and the agent's SocketRelay; flow control, half-close) arrive byte-exact across blips",
  LIMIT,
  async (t) => {
    const h = harness(t);
    keepAlive(h);
    let server: PacketConn | undefined;
    let agent: EndpointConn | undefined;
    const s = new Session(
      {},
      dispatch(() => server!),
      dispatch(() => agent!),
    );
    h.defer(() => s.close());
    // Small windows, so that credit (WINDOW_UPDATE) has to cross many times, and cross the blips.
    const flow = { sendWindow: 64 * 1024, receiveWindow: 64 * 1024 };
    server = new ServerSideConn(s.a, 1n, { flow, halfClose: true });
    agent = new EndpointConn(s.b, 1n, '127.0.0.1:1', { flow, halfClose: true });
    const agentEnded = relayEnded(agent);
    const target = await socketPair(h);
    agent.attach(target.near);
    h.defer(() => {
      server.destroy();
      agent.destroy();
    });
    const up = randomBytes(8 * 1024 * 1024);
    const down = randomBytes(8 * 1024 * 1024);
    const transfer = Promise.all([exchange(server, down), exchangeSocket(target.far, up)]);
    // A blip at every MiB the agent has received, down for a few turns while both sides keep writing.
    const random = seeded(11);
    let nextBlipAt = 1024 * 1024;
    const blipping = (async () => {
      while (nextBlipAt < down.length) {
        await tick();
        if (agent.bytesReceived < nextBlipAt) continue;
        nextBlipAt += 1024 * 1024;
        s.blip();
        for (let k = 1 + Math.floor(random() * 20); k > 0; k--) await tick();
        s.resume();
      }
    })();
    const [atServer, atAgent] = await transfer;
    await blipping;
    assert.equal(s.blips, 7, 'the transfer went through a blip at every MiB');
    assert.equal(atAgent.length, down.length);
    assert.equal(sha(atAgent), sha(down), 'server → agent byte-exact');
    assert.equal(atServer.length, up.length);
    assert.equal(sha(atServer), sha(up), 'agent → server byte-exact');
    assert.ok(s.a.resentBytes + s.b.resentBytes > 0, 'some DATA was resent');
    // Both halves closed: the connections finish as without a blip.
    const [, agentErr] = await Promise.all([server.destroyed ? undefined : once(server, 'close'), agentEnded]);
    assert.equal(server.errored, null);
    assert.equal(agentErr, undefined);
  },
);

test(
  'over real gRPC packet calls (HTTP/2): 8 MiB each way between two SocketRelays (CONNECT caller, agent target) survive their connection destroyed mid-flight, three times',
  LIMIT,
  async (t) => {
    const h = harness(t);
    keepAlive(h);
    let server: TunnelRelay | undefined;
    let agent: EndpointConn | undefined;
    const broken: ResumeError[] = [];
    const a = new ResumableLink({ onPacket: dispatch(() => server!), onBroken: (e) => broken.push(e) });
    const b = new ResumableLink({ onPacket: dispatch(() => agent!), onBroken: (e) => broken.push(e) });
    h.defer(() => (a.close(), b.close()));
    const pairs: MemoryLinkPair[] = [];
    const connectPair = async (): Promise<void> => {
      const pair = await memoryLinkPair();
      pairs.push(pair);
      h.defer(() => pair.close());
      pair.onServerPacket((p) => a.receive(pair.server, p));
      pair.onAgentPacket((p) => b.receive(pair.agent, p));
      const aReceived = a.received;
      a.attach(pair.server, b.received);
      b.attach(pair.agent, aReceived);
    };
    await connectPair();
    const flow = { sendWindow: 1024 * 1024, receiveWindow: 1024 * 1024 };
    server = new TunnelRelay({ agentID: 'edge-1', link: a, halfClose: true, resumes: 0 }, 1n, '127.0.0.1:1', { flow, halfClose: true });
    agent = new EndpointConn(b, 1n, '127.0.0.1:1', { flow, halfClose: true });
    const ends = Promise.all([relayEnded(server), relayEnded(agent)]);
    const caller = await socketPair(h);
    const target = await socketPair(h);
    server.attach(caller.near);
    agent.attach(target.near);
    h.defer(() => (server.destroy(), agent.destroy()));
    const up = randomBytes(8 * 1024 * 1024);
    const down = randomBytes(8 * 1024 * 1024);
    const transfer = Promise.all([exchangeSocket(caller.far, down), exchangeSocket(target.far, up)]);
    let cuts = 0;
    for (const at of [2, 4, 6]) {
      while (agent.bytesReceived < at * 1024 * 1024) await sleep(1);
      // The connection under both calls goes away at once: what HTTP/2 and the transport held is lost.
      const pair = pairs.at(-1)!;
      pair.agentTransport.destroy();
      pair.serverTransport.destroy();
      a.detach();
      b.detach();
      cuts++;
      await sleep(10);
      await connectPair();
    }
    const [atServer, atAgent] = await transfer;
    assert.equal(cuts, 3);
    assert.equal(sha(atAgent), sha(down), 'server → agent byte-exact');
    assert.equal(sha(atServer), sha(up), 'agent → server byte-exact');
    assert.ok(a.resentBytes > 0 && b.resentBytes > 0, `both ends resent DATA (${a.resentBytes}, ${b.resentBytes} bytes)`);
    assert.deepEqual(broken, []);
    assert.deepEqual(await ends, [undefined, undefined], 'both relays closed cleanly');
  },
);

async function waitUntil(cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(2);
  }
}
