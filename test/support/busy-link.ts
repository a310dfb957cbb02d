// Busy connections through a tunnel whose agent link is reset again and again
// (issue 33; busy-link-resets*.test.ts): the real agent CLI as a child process,
// so that a crash shows as its exit (SIGSEGV), and connections through the
// CONNECT socket to a loopback target that upload and download at once, every
// byte of each direction checked against the stream it should be.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { startBlipRelay, type BlipRelay } from './blip-relay.js';
import type { Harness } from './harness.js';
import { testPKI, writePKIFiles } from './pki.js';
import { AGENT_BIN, startProcess, type Proc } from './processes.js';
import { connectVia, startServer, startTCPServer, tempDir, waitFor, type TestServer } from './tunnel.js';

/** Traffic between resets: each connection moves at least this much both ways (busy()), then a gap. */
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
export class StreamVerifier {
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
export class StreamWriter {
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
export class End {
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

export interface Connection {
  id: number;
  client: End;
  /** The target's side, once its first bytes (the id) arrived. */
  target(): End | undefined;
}

/** A loopback target: each connection sends its id first; then both ends write and check the stream. */
export async function startTarget(h: Harness): Promise<{ port: number; ends: Map<number, End> }> {
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
export async function open(h: Harness, server: TestServer, target: { port: number; ends: Map<number, End> }, id: number): Promise<Connection> {
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

export function progress(c: Connection): { up: number; down: number } {
  return { up: c.target()?.verifier.received ?? 0, down: c.client.verifier.received };
}

export interface Agent {
  proc: Proc;
  /** Each output line with when it arrived (performance.now()). */
  timed: Array<{ at: number; line: string }>;
}

/** The real agent for edge-1 dialing `address`; `flags` after the common ones. */
export async function startAgentProcess(h: Harness, address: string, flags: string[]): Promise<Agent> {
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
export function assertAlive(agent: Agent, when: string): void {
  const { exitCode, signalCode } = agent.proc.child;
  if (exitCode === null && signalCode === null) return;
  assert.fail(`the agent exited (${exitCode ?? signalCode}) ${when}; its last lines:\n${agent.proc.lines.slice(-15).join('\n')}`);
}

/** waitFor, failing at once if the agent died meanwhile. */
export async function whileAlive(agent: Agent, what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  try {
    await waitFor(
      what,
      () => {
        assertAlive(agent, `while waiting for ${what}`);
        return cond();
      },
      timeoutMs,
    );
  } catch (err: unknown) {
    // The agent's last lines say what it was doing instead.
    const last = agent.timed.slice(-40).map((l) => `  ${Math.round(l.at)} ${l.line}`);
    throw new Error(`${(err as Error).message}; the agent's last lines:\n${last.join('\n')}`, { cause: err });
  }
}

/** Fails at once if a side of a connection read a wrong byte (it then closed its socket, and its traffic stopped). */
export function assertNoWrongBytes(conns: Connection[], when: string): void {
  for (const c of conns) {
    for (const [side, end] of [
      ['download (read by the caller)', c.client],
      ['upload (read by the target)', c.target()],
    ] as const) {
      if (end?.wrong !== undefined) assert.fail(`connection ${c.id}, ${side}, ${when}: ${end.wrong.message}`);
    }
  }
}

/** Lets `gapMs` to twice that of traffic pass after every connection moved BUSY_BYTES both ways since `from`. */
export async function busy(agent: Agent, conns: Connection[], from: Array<{ up: number; down: number }>, gapMs: number, what: string): Promise<void> {
  await whileAlive(
    agent,
    `${what}: traffic on every connection`,
    () => {
      assertNoWrongBytes(conns, what);
      return conns.every((c, i) => movedSince(c, from[i]!, BUSY_BYTES));
    },
    15_000,
  );
  await sleep(gapMs * (1 + Math.random()));
  assertAlive(agent, what);
}

/** How long after each reset the agent logged `re`, in ms. */
export function noticedAfter(agent: Agent, resetAt: number[], re: RegExp): number[] {
  const seen = agent.timed.filter((l) => re.test(l.line)).map((l) => l.at);
  return resetAt.map((at) => Math.round((seen.find((s) => s >= at) ?? NaN) - at));
}

/** Median, max and how many over 1 s of reset-to-notice times. */
export function summary(ms: number[]): string {
  const sorted = [...ms].sort((a, b) => a - b);
  return `median ${sorted[Math.floor(sorted.length / 2)]} ms, max ${sorted[sorted.length - 1]} ms, over 1 s: ${ms.filter((x) => x > 1000).length}/${ms.length}`;
}

/**
 * A server with session resume (`windowMs`), the agent CLI reaching it through
 * a blip relay, and `connections` connections busy both ways.
 */
export async function startResumingBusyLink(
  h: Harness,
  windowMs: number,
  connections: number,
): Promise<{ server: TestServer; relay: BlipRelay; agent: Agent; conns: Connection[] }> {
  const target = await startTarget(h);
  const server = await startServer(h, { endpoint: { resumeWindowMs: windowMs } });
  const relay = await startBlipRelay(h, [server.endpoint.address.port]);
  const agent = await startAgentProcess(h, `127.0.0.1:${relay.port}`, ['--resume-window', `${windowMs}ms`]);
  await waitFor('agent edge-1 to register', () => server.tunnel.registry.agentCount === 1);
  assert.equal(server.tunnel.sessions.size, 1, 'the link negotiated session resume');
  const conns: Connection[] = [];
  for (let id = 0; id < connections; id++) conns.push(await open(h, server, target, id));
  return { server, relay, agent, conns };
}

/** Ends both directions of every connection; each must end normally with every byte arrived once, in order. */
export async function endAndCount(agent: Agent, conns: Connection[]): Promise<void> {
  for (const c of conns) {
    c.client.writer.finish();
    c.target()!.writer.finish();
  }
  await whileAlive(agent, 'every stream to end', () => conns.every((c) => c.client.ended !== undefined && c.target()!.ended !== undefined), 30_000);
  assertNoWrongBytes(conns, 'at the end');
  for (const c of conns) {
    const t = c.target()!;
    assert.equal(t.ended, 'end', `connection ${c.id}: the upload ended normally`);
    assert.equal(c.client.ended, 'end', `connection ${c.id}: the download ended normally`);
    assert.equal(t.verifier.received, c.client.writer.sent, `connection ${c.id}: every byte uploaded arrived once`);
    assert.equal(c.client.verifier.received, t.writer.sent, `connection ${c.id}: every byte downloaded arrived once`);
  }
}
