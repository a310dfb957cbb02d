// Issue 33: a caller opens a CONNECT and does not read; the agent behind it
// stays inside its window but sends 1-byte DATA, plain or padded with a
// protobuf field the decoder skips. The caller's socket queue counts each
// payload as one byte: without a rule, a padded payload kept the HTTP/2 read
// it arrived in (a window of them, a gigabyte), and a plain one its own write
// entry, Buffer and ArrayBuffer (~260 bytes of heap per byte). A padding far
// beyond the payload is refused (the call ends with INTERNAL saying why); what
// is accepted and waits is copied together into chunks of its own
// (coalescer.ts). Memory is measured in-process (server and scripted agent)
// after a full GC, as the JS heap plus ArrayBuffer memory, with generous margins.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import { test } from 'node:test';
import { setImmediate as tick, setTimeout as delay } from 'node:timers/promises';
import { GrpcDeframer, grpcFrameHeader } from '../../pkg/grpc/frame.js';
import { encodePacket } from '../../pkg/protocol/codec.js';
import { decodePacket, MAX_SKIPPED_BYTES } from '../../pkg/protocol/decode.js';
import { CONN_WINDOW_HEADER, DEFAULT_CONN_WINDOW } from '../../pkg/protocol/flow-control.js';
import type { MuxConn } from '../../pkg/mux/mux-conn.js';
import { exposedGc } from '../support/gc.js';
import { harness, type Harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';
import { connectVia, startServer, waitFor, type TestServer } from '../support/tunnel.js';

const KiB = 1024;
const MiB = 1024 * KiB;
const CONNECT_ID = 7n;
const LIMIT = { timeout: 120_000 };
/** Payload of the ordinary DATA that fills the caller's socket first. */
const FILL_PAYLOAD = 16 * KiB;
/** Window kept back for the padded packets when filling. */
const RESERVE = 48 * KiB;

const gc = exposedGc();

/** The JS heap and ArrayBuffer memory of the process after full GCs, once what is under way has settled. */
async function heldMemory(): Promise<number> {
  await delay(50);
  gc();
  await tick();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/** A framed DATA message: `payload`, then an unknown top-level field (15) of `pad` bytes. */
function paddedData(payload: Buffer, pad: number): Buffer {
  const packet = encodePacket({ type: 'DATA', connectID: CONNECT_ID, error: '', data: payload });
  let field = Buffer.from([(15 << 3) | 2]);
  if (pad > 0) {
    const len: number[] = [];
    for (let v = pad; ; v = Math.floor(v / 128)) {
      if (v < 128) {
        len.push(v);
        break;
      }
      len.push((v & 0x7f) | 0x80);
    }
    field = Buffer.concat([field, Buffer.from(len), Buffer.alloc(pad, 0x5a)]);
  } else {
    field = Buffer.alloc(0);
  }
  return Buffer.concat([grpcFrameHeader(packet.length + field.length), packet, field]);
}

/** An agent written for this attack: it answers one dial, keeps to its window, and sends what it is told. */
async function scriptedFlooder(h: Harness, address: string, agentID: string) {
  const pki = testPKI();
  const identifiers = `ipv4=127.0.0.1&host=${agentID}`;
  const session = http2.connect(`https://${address}`, { ca: pki.ca.cert, ...pki.agent(agentID, identifiers), servername: 'localhost' });
  h.defer(() => session.destroy());
  session.on('error', () => {});
  await once(session, 'connect');
  const call = session.request({
    ':method': 'POST',
    ':path': '/AgentService/Connect',
    'content-type': 'application/grpc',
    te: 'trailers',
    agentid: agentID,
    agentidentifiers: identifiers,
    [CONN_WINDOW_HEADER]: String(DEFAULT_CONN_WINDOW),
  });
  call.on('error', () => {});
  const [headers] = (await once(call, 'response')) as [http2.IncomingHttpHeaders];
  let granted = Number(headers[CONN_WINDOW_HEADER]);
  assert.ok(granted > 0, 'the server negotiated flow control');
  let closed = false;
  const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => {
    call.once('trailers', resolve);
    call.once('close', () => {
      closed = true;
      resolve({});
    });
  });
  let onGrant: (() => void) | undefined;
  const deframer = new GrpcDeframer();
  call.on('data', (chunk: Buffer) => {
    for (const m of deframer.push(chunk)) {
      const p = decodePacket(m);
      if (p.type === 'DIAL_REQ') {
        const rsp = encodePacket({ type: 'DIAL_RSP', error: '', connectID: CONNECT_ID, random: p.random });
        call.write(Buffer.concat([grpcFrameHeader(rsp.length), rsp]));
      } else if (p.type === 'WINDOW_UPDATE' && p.connectID === CONNECT_ID) {
        granted += Number(p.bytes);
        onGrant?.();
      }
    }
  });
  let sent = 0;
  /** Writes `bytes` carrying `payloadBytes` of DATA payload, waiting for HTTP/2 to take them. */
  const write = async (bytes: Buffer, payloadBytes: number): Promise<void> => {
    assert.ok(payloadBytes <= granted - sent, 'the agent keeps to its window');
    sent += payloadBytes;
    if (call.write(bytes)) return;
    // Not a race with `trailers`: each race would leave a reaction on it, held as long as the call (memory is measured here).
    await new Promise<void>((resolve) => {
      const done = (): void => {
        call.off('drain', done);
        call.off('close', done);
        resolve();
      };
      call.on('drain', done);
      call.on('close', done);
    });
  };
  /** Resolves on the next grant, or after `ms` without one. */
  const nextGrant = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      onGrant = () => {
        clearTimeout(timer);
        onGrant = undefined;
        resolve();
      };
    });
  return {
    call,
    trailers,
    write,
    nextGrant,
    get credit() {
      return granted - sent;
    },
    get sent() {
      return sent;
    },
    get closed() {
      return closed;
    },
  };
}

type Flooder = Awaited<ReturnType<typeof scriptedFlooder>>;

/** The server's side of the connection (a TunnelRelay joined to the caller's socket). */
function serverConn(server: TestServer): MuxConn | undefined {
  return server.tunnel.registry.all()[0]?.conns.get(CONNECT_ID);
}

/**
 * A caller CONNECTs through `agent` and reads nothing; the agent sends
 * ordinary DATA until the server grants no more (the caller's socket is
 * full), keeping RESERVE of its window. Resolves once the server has it all.
 */
async function fillCaller(h: Harness, server: TestServer, agent: Flooder): Promise<{ destroy(): void }> {
  const caller = await connectVia(server.udsPath, '127.0.0.1:10250');
  assert.equal(caller.status, 200, caller.head);
  h.defer(() => caller.socket.destroy());
  caller.socket.pause();
  const ordinary = paddedData(Buffer.alloc(FILL_PAYLOAD, 0x41), 0);
  for (let i = 0; i < 4000; i++) {
    if (agent.credit >= FILL_PAYLOAD + RESERVE) {
      await agent.write(ordinary, FILL_PAYLOAD);
      continue;
    }
    const before = agent.credit;
    await agent.nextGrant(500);
    if (agent.credit === before) break;
  }
  assert.ok(agent.credit >= RESERVE, `the agent kept ${RESERVE} bytes of its window (it has ${agent.credit})`);
  await waitFor('the server to have the ordinary DATA', () => serverConn(server)?.bytesReceived === agent.sent, 10_000);
  return { destroy: () => caller.socket.destroy() };
}

/** Sends `count` 1-byte DATA padded with `pad` bytes, 64 to a write, while the call lasts. */
async function sendPadded(agent: Flooder, count: number, pad: number): Promise<void> {
  const one = paddedData(Buffer.from('x'), pad);
  const batch = Buffer.concat(Array.from({ length: 64 }, () => one));
  for (let i = 0; i < count / 64 && !agent.closed; i++) await agent.write(batch, 64);
}

/**
 * A caller that does not read is filled, then sent `count` 1-byte DATA padded
 * with `pad` bytes: what waits keeps a small multiple of the bytes counted
 * (a fixed allowance aside), and goes when the caller closes.
 */
async function smallDataToCallerThatDoesNotRead(h: Harness, pad: number): Promise<void> {
  const server = await startServer(h);
  const start = await heldMemory();
  const agent = await scriptedFlooder(h, server.agentAddress, 'edge-pad');
  await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
  const caller = await fillCaller(h, server, agent);
  const filled = await heldMemory();

  const count = 32 * KiB;
  const before = agent.sent;
  await sendPadded(agent, count, pad);
  await waitFor('the server to have every small packet', () => serverConn(server)?.bytesReceived === before + count, 20_000);
  assert.equal(server.tunnel.registry.agentCount, 1, 'packets under the limit are accepted');
  const held = (await heldMemory()) - filled;
  // Without coalescing each waiting byte kept a socket write entry, a Buffer and
  // an ArrayBuffer (~8.5 MB here), and, padded, without a copy its share of a
  // 64 KiB read (~32 MiB).
  const bound = 4 * count + 1 * MiB;
  assert.ok(held < bound, `${count} waiting 1-byte payloads keep ${(held / KiB).toFixed(0)} KiB (bound ${(bound / KiB).toFixed(0)} KiB)`);

  caller.destroy();
  await waitFor('the connection to close', () => serverConn(server) === undefined, 10_000);
  const after = (await heldMemory()) - start;
  assert.ok(after < 2 * MiB, `${(after / MiB).toFixed(1)} MiB still held after the caller closed (bound 2 MiB)`);
}

test('1-byte DATA to a caller that does not read: what waits costs about its bytes, not a write per packet', LIMIT, async (t) => {
  await smallDataToCallerThatDoesNotRead(harness(t), 0);
});

test(
  '1-byte DATA padded just under the limit to a caller that does not read: what waits keeps about a byte per byte, and is freed with it',
  LIMIT,
  async (t) => {
    // Unused bytes: the pad field (tag, 2-byte length, pad) and the payload's wrapper (tag, length).
    await smallDataToCallerThatDoesNotRead(harness(t), MAX_SKIPPED_BYTES - 1 - 2 - 2);
  },
);

test(
  "1-byte DATA padded with 16,000 bytes the decoder skips ends the agent's call with INTERNAL saying why; nothing is kept and the server serves on",
  LIMIT,
  async (t) => {
    const h = harness(t);
    const server = await startServer(h);
    const agent = await scriptedFlooder(h, server.agentAddress, 'edge-pad');
    await waitFor('registration', () => server.tunnel.registry.agentCount === 1);
    await fillCaller(h, server, agent);
    const filled = await heldMemory();

    await sendPadded(agent, 2048, 16_000);
    const trailers = await Promise.race([agent.trailers, new Promise<undefined>((r) => setTimeout(() => r(undefined), 10_000).unref())]);
    assert.ok(trailers !== undefined, 'the call ended');
    assert.equal(trailers['grpc-status'], '13');
    assert.match(
      decodeURIComponent(String(trailers['grpc-message'])),
      /^malformed packet: 16005 of its 16012 bytes are fields it does not use \(unknown, or repeated and superseded\); at most 1024, or as many as it uses, are accepted$/,
    );
    await waitFor('the agent gone', () => server.tunnel.registry.agentCount === 0);
    const lines = server.log.find('agent disconnected').filter((r) => /fields it does not use/.test(String(r.fields.reason)));
    assert.equal(lines.length, 1, 'one line says why');
    const held = (await heldMemory()) - filled;
    assert.ok(held < 4 * MiB, `${(held / MiB).toFixed(1)} MiB of buffers kept (bound 4 MiB)`);

    // The server serves on: the agent comes back, and honest DATA flows.
    const again = await scriptedFlooder(h, server.agentAddress, 'edge-pad');
    await waitFor('registration again', () => server.tunnel.registry.agentCount === 1);
    const caller = await connectVia(server.udsPath, '127.0.0.1:10250');
    assert.equal(caller.status, 200, caller.head);
    h.defer(() => caller.socket.destroy());
    await again.write(paddedData(Buffer.from('hello'), 0), 5);
    const got: Buffer[] = [];
    caller.socket.on('data', (c: Buffer) => got.push(c));
    caller.socket.resume();
    await waitFor('the bytes', () => Buffer.concat(got).toString() === 'hello');
  },
);
