// The agent's link to the server reset again and again while its connections
// are busy (issue 33): the real agent CLI as a child process (a crash shows as
// its exit, SIGSEGV), four connections through the CONNECT socket each
// uploading and downloading at once to a loopback target, and a relay between
// agent and server that resets the link (RST to both ends) after every
// 0.25-0.5 s of full traffic, two dozen times. With session resume every byte arrives once and in
// order; without it each reset ends the connections it broke, with no byte
// doubled or wrong, and new ones work after it.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { startBlipRelay } from '../support/blip-relay.js';
import { harness, type Harness } from '../support/harness.js';
import { testPKI, writePKIFiles } from '../support/pki.js';
import { AGENT_BIN, startProcess, type Proc } from '../support/processes.js';
import { connectVia, startServer, startTCPServer, tempDir, waitFor, type TestServer } from '../support/tunnel.js';

const RESETS = 24;
const CONNECTIONS = 4;
/** Traffic between resets: each connection moves at least this much both ways, and then 0.25-0.5 s pass. */
const BUSY_BYTES = 256 * 1024;
const CHUNK = 64 * 1024;
const ID_BYTES = 4;
const BLOCK = ((): Buffer => {
  const seed = createHash('sha512').update('busy-link-resets').digest();
  const b = Buffer.alloc(CHUNK);
  for (let o = 0; o < CHUNK; o += seed.length) seed.copy(b, o);
  return b;
})();

/** Chunk `i` of every stream: one pseudo-random block stamped with `i`, so that a byte lost, doubled, swapped or changed shows. */
function chunkAt(i: number): Buffer {
  const c = Buffer.from(BLOCK);
  c.writeUInt32BE(i, 0);
  c.writeUInt32BE(~i >>> 0, CHUNK - 4);
  return c;
}

/** Checks what a socket reads against the stream, from its first byte. */
class StreamVerifier {
  received = 0;
  private chunk = chunkAt(0);
  private chunkIndex = 0;

  update(data: Buffer): void {
    let pos = 0;
    while (pos < data.length) {
      const i = Math.floor(this.received / CHUNK);
      const at = this.received % CHUNK;
      const len = Math.min(CHUNK - at, data.length - pos);
      if (i !== this.chunkIndex) {
        this.chunk = chunkAt(i);
        this.chunkIndex = i;
      }
      if (!data.subarray(pos, pos + len).equals(this.chunk.subarray(at, at + len))) {
        throw new Error(`bytes ${this.received}..${this.received + len} are not the stream's: lost, doubled, reordered or corrupted`);
      }
      pos += len;
      this.received += len;
    }
  }
}

/** One direction of a connection: the stream written with back-pressure until `finish()`, then ended. */
class StreamWriter {
  private next = 0;
  private finishing = false;

  constructor(private readonly socket: Socket) {
    this.go();
  }

  get sent(): number {
    return this.next * CHUNK;
  }

  finish(): void {
    this.finishing = true;
    this.socket.off('drain', this.go);
    if (!this.socket.destroyed) this.socket.end();
  }

  private readonly go = (): void => {
    while (!this.finishing && !this.socket.destroyed) {
      if (!this.socket.write(chunkAt(this.next++))) {
        this.socket.once('drain', this.go);
        return;
      }
    }
  };
}

/** One side of a busy connection: writes the stream, checks the stream it reads, and notes how it ended. */
class End {
  readonly verifier = new StreamVerifier();
  readonly writer: StreamWriter;
  /** The first wrong byte read, if any. */
  wrong: Error | undefined;
  /** 'end' once EOF was read; 'close' without one; undefined while open. */
  ended: 'end' | 'close' | undefined;
  closed = false;

  constructor(
    readonly socket: Socket,
    first: Buffer = Buffer.alloc(0),
  ) {
    socket.on('error', () => {});
    socket.on('data', (c: Buffer) => this.read(c));
    socket.once('end', () => (this.ended ??= 'end'));
    socket.once('close', () => {
      this.ended ??= 'close';
      this.closed = true;
    });
    if (first.length > 0) this.read(first);
    socket.resume();
    this.writer = new StreamWriter(socket);
  }

  private read(c: Buffer): void {
    if (this.wrong !== undefined) return;
    try {
      this.verifier.update(c);
    } catch (err: unknown) {
      this.wrong = err as Error;
      this.socket.destroy();
    }
  }
}

interface Connection {
  id: number;
  client: End;
  /** The target's side, once its first bytes (the id) arrived. */
  target(): End | undefined;
}

/** A loopback target: each connection sends its id first; then both ends write and check the stream. */
async function startTarget(h: Harness): Promise<{ port: number; ends: Map<number, End> }> {
  const ends = new Map<number, End>();
  const { port } = await startTCPServer(h, (s) => {
    let head = Buffer.alloc(0);
    const onData = (c: Buffer): void => {
      head = Buffer.concat([head, c]);
      if (head.length < ID_BYTES) return;
      s.off('data', onData);
      s.pause();
      ends.set(head.readUInt32BE(0), new End(s, head.subarray(ID_BYTES)));
    };
    s.on('data', onData);
  });
  return { port, ends };
}

/** A connection through the CONNECT socket to the target, busy both ways. */
async function open(h: Harness, server: TestServer, target: { port: number; ends: Map<number, End> }, id: number): Promise<Connection> {
  const res = await connectVia(server.udsPath, `127.0.0.1:${target.port}`);
  h.defer(() => res.socket.destroy());
  assert.equal(res.status, 200, res.head);
  const head = Buffer.alloc(ID_BYTES);
  head.writeUInt32BE(id, 0);
  res.socket.write(head);
  return { id, client: new End(res.socket, res.rest), target: () => target.ends.get(id) };
}

/** Both directions of `c` have moved `bytes` more than at `from`. */
function movedSince(c: Connection, from: { up: number; down: number }, bytes: number): boolean {
  const t = c.target();
  return t !== undefined && t.verifier.received >= from.up + bytes && c.client.verifier.received >= from.down + bytes;
}

function progress(c: Connection): { up: number; down: number } {
  return { up: c.target()?.verifier.received ?? 0, down: c.client.verifier.received };
}

interface Agent {
  proc: Proc;
  /** Each output line with when it arrived (performance.now()). */
  timed: Array<{ at: number; line: string }>;
}

/** The real agent for edge-1 dialing `address`; `flags` after the common ones. */
async function startAgentProcess(h: Harness, address: string, flags: string[]): Promise<Agent> {
  const pki = testPKI();
  const files = await writePKIFiles(await tempDir(h), pki.agent('edge-1', 'ipv4=127.0.0.1&host=edge-1'), pki.ca);
  const proc = startProcess(h, AGENT_BIN, [
    ...['--node-name', 'edge-1', '--node-ip', '127.0.0.1', '--tunnelserver-addr', address, '--meta-port', '0'],
    ...['--ca-file', files.caFile, '--cert-file', files.certFile, '--key-file', files.keyFile],
    ...['--sync-interval', '100ms', '--sync-interval-cap', '500ms', '--v', '2'],
    ...flags,
  ]);
  const timed: Agent['timed'] = [];
  const note = (buf: Buffer): void => {
    const at = performance.now();
    for (const line of buf.toString().split('\n')) if (line !== '') timed.push({ at, line });
  };
  proc.child.stdout!.on('data', note);
  proc.child.stderr!.on('data', note);
  await proc.waitForLine(/connected to tunnel server/, 20_000);
  return { proc, timed };
}

/** Fails at once, with its last words, if the agent process has exited. */
function assertAlive(agent: Agent, when: string): void {
  const { exitCode, signalCode } = agent.proc.child;
  if (exitCode === null && signalCode === null) return;
  assert.fail(`the agent exited (${exitCode ?? signalCode}) ${when}; its last lines:\n${agent.proc.lines.slice(-15).join('\n')}`);
}

/** waitFor, failing at once if the agent died meanwhile. */
async function whileAlive(agent: Agent, what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  await waitFor(
    what,
    () => {
      assertAlive(agent, `while waiting for ${what}`);
      return cond();
    },
    timeoutMs,
  );
}

/** Lets 0.25-0.5 s of traffic pass after every connection moved BUSY_BYTES both ways since `from`. */
async function busy(agent: Agent, conns: Connection[], from: Array<{ up: number; down: number }>, what: string): Promise<void> {
  await whileAlive(agent, `${what}: traffic on every connection`, () => conns.every((c, i) => movedSince(c, from[i]!, BUSY_BYTES)), 15_000);
  await sleep(250 + Math.random() * 250);
  assertAlive(agent, what);
}

/** How long after each reset the agent logged `re`, in ms. */
function noticedAfter(agent: Agent, resetAt: number[], re: RegExp): number[] {
  const seen = agent.timed.filter((l) => re.test(l.line)).map((l) => l.at);
  return resetAt.map((at) => Math.round((seen.find((s) => s >= at) ?? NaN) - at));
}

function summary(ms: number[]): string {
  const sorted = [...ms].sort((a, b) => a - b);
  return `median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted[sorted.length - 1]} ms, over 1 s: ${ms.filter((x) => x > 1000).length}/${ms.length}`;
}

test(
  'with session resume: 24 resets of a busy link, the agent process lives and every byte of 4 connections arrives once, in order, both ways',
  { timeout: 120_000 },
  async (t) => {
    const h = harness(t);
    const windowMs = 3000;
    const target = await startTarget(h);
    const server = await startServer(h, { endpoint: { resumeWindowMs: windowMs } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    const agent = await startAgentProcess(h, `127.0.0.1:${relay.port}`, ['--resume-window', `${windowMs}ms`]);
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
    assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');

    const conns: Connection[] = [];
    for (let id = 0; id < CONNECTIONS; id++) conns.push(await open(h, server, target, id));
    const resetAt: number[] = [];
    for (let r = 0; r < RESETS; r++) {
      await busy(agent, conns, conns.map(progress), `before reset ${r + 1}`);
      resetAt.push(performance.now());
      await relay.blip('reset', 100);
      await whileAlive(agent, `the resume after reset ${r + 1}`, () => server.log.find('agent link resumed').length === r + 1, windowMs + 5000);
    }
    await busy(agent, conns, conns.map(progress), 'after the last reset');

    for (const c of conns) {
      c.client.writer.finish();
      c.target()!.writer.finish();
    }
    await whileAlive(agent, 'every stream to end', () => conns.every((c) => c.client.ended !== undefined && c.target()!.ended !== undefined), 30_000);
    for (const c of conns) {
      const t = c.target()!;
      assert.equal(c.client.wrong ?? t.wrong, undefined);
      assert.equal(t.ended, 'end', `connection ${c.id}: the upload ended normally`);
      assert.equal(c.client.ended, 'end', `connection ${c.id}: the download ended normally`);
      assert.equal(t.verifier.received, c.client.writer.sent, `connection ${c.id}: every byte uploaded arrived once`);
      assert.equal(c.client.verifier.received, t.writer.sent, `connection ${c.id}: every byte downloaded arrived once`);
    }
    const moved = conns.reduce((n, c) => n + c.client.verifier.received + c.target()!.verifier.received, 0);
    assert.equal(server.log.find('agent session expired; closing its connections').length, 0, 'no session expired');
    const noticed = noticedAfter(agent, resetAt, /link to tunnel server dropped/);
    console.log(`resume on: ${RESETS} resets, ${Math.round(moved / 2 ** 20)} MiB moved; the agent noticed each after: ${summary(noticed)}`);
    assertAlive(agent, 'at the end');
  },
);

test(
  'without session resume: 24 resets of a busy link, the agent process lives, broken connections end with no byte doubled or wrong, new ones work',
  { timeout: 120_000 },
  async (t) => {
    const h = harness(t);
    const target = await startTarget(h);
    // Without resume, gRPC keepalive is what notices a reset an HTTP/2 session holds unread behind a blocked
    // write, on either end: a ping after 0.5 s of quiet here, not after 35 s (agent) or 10 s (server).
    const server = await startServer(h, { endpoint: { minPingIntervalMs: 250, keepaliveTimeMs: 500, keepaliveTimeoutMs: 500 } });
    const relay = await startBlipRelay(h, [server.endpoint.address.port]);
    const agent = await startAgentProcess(h, `127.0.0.1:${relay.port}`, ['--resume-window', '0', '--keepalive-time', '500ms', '--keepalive-timeout', '500ms']);
    await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
    assert.equal(server.tunnel.sessions.size, 0, 'no session resume');

    let nextID = 0;
    const resetAt: number[] = [];
    let moved = 0;
    for (let r = 0; r <= RESETS; r++) {
      const stream = server.tunnel.registry.streamsOf('edge-1')[0];
      const conns = await Promise.all(Array.from({ length: CONNECTIONS }, () => open(h, server, target, nextID++)));
      await busy(
        agent,
        conns,
        conns.map(() => ({ up: 0, down: 0 })),
        r < RESETS ? `before reset ${r + 1}` : 'after the last reset',
      );
      if (r === RESETS) {
        for (const c of conns) {
          c.client.writer.finish();
          c.target()!.writer.finish();
        }
      } else {
        resetAt.push(performance.now());
        await relay.blip('reset', 100);
      }
      // Each end closes: cut by the reset, or (after the last) ended by both sides.
      await whileAlive(agent, `the connections of round ${r + 1} to close`, () => conns.every((c) => c.client.closed && c.target()!.closed), 10_000).catch(
        (err: unknown) => {
          const ends = conns.map((c) => `${c.id}: caller ${c.client.ended ?? 'open'}, target ${c.target()?.ended ?? 'open'}`).join('; ');
          throw new Error(`${(err as Error).message} (${ends}); the agent's last lines:\n${agent.proc.lines.slice(-15).join('\n')}`);
        },
      );
      for (const c of conns) {
        const t = c.target()!;
        assert.equal(c.client.wrong ?? t.wrong, undefined);
        assert.ok(t.verifier.received <= c.client.writer.sent && c.client.verifier.received <= t.writer.sent, 'nothing arrived that was not sent');
        moved += t.verifier.received + c.client.verifier.received;
        if (r === RESETS) {
          assert.equal(t.verifier.received, c.client.writer.sent);
          assert.equal(c.client.verifier.received, t.writer.sent);
        }
      }
      if (r < RESETS) {
        await whileAlive(
          agent,
          `the agent back after reset ${r + 1}`,
          () => server.tunnel.registry.agentCount === 1 && server.tunnel.registry.streamsOf('edge-1')[0] !== stream,
          10_000,
        );
      }
    }
    const noticed = noticedAfter(agent, resetAt, /lost connection to tunnel server/);
    console.log(`resume off: ${RESETS} resets, ${Math.round(moved / 2 ** 20)} MiB moved; the agent noticed each after: ${summary(noticed)}`);
    assertAlive(agent, 'at the end');
  },
);
