// What the bench client measures, one function per figure. Every loop is
// bounded in count and in time (OP_DEADLINE_MS). Times are in µs for round
// trips and ms for connections; throughput is returned as seconds and bytes
// so that the driver does the arithmetic once.

import { appendFileSync } from 'node:fs';
import { LeanConn, type BenchPath } from './lean-conn.js';

const OP_DEADLINE_MS = 180_000;

function deadline<T>(what: string, p: Promise<T>, ms = OP_DEADLINE_MS): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

function bulkRequest(bytes: number): Buffer {
  const head = Buffer.alloc(9);
  head.write('B');
  head.writeBigUInt64BE(BigInt(bytes), 1);
  return head;
}

/** Resolves once `conn` has received `bytes` payload bytes in all. */
function receiveAll(conn: LeanConn, bytes: number): Promise<void> {
  return new Promise((resolve, reject) => {
    if (conn.received >= bytes) return resolve();
    conn.onBytes = () => {
      if (conn.received >= bytes) {
        conn.onBytes = undefined;
        resolve();
      }
    };
    void conn.closed.then(() => {
      if (conn.received < bytes) reject(new Error(`closed after ${conn.received} of ${bytes} bytes`));
    });
  });
}

export interface BulkResult {
  seconds: number;
  bytes: number;
}

/** Target → client: `bytes` from the target, timed from the request to the last byte. */
export async function bulk(path: BenchPath, bytes: number): Promise<BulkResult> {
  const conn = await LeanConn.open(path);
  const started = performance.now();
  conn.write(bulkRequest(bytes));
  await deadline('bulk transfer', receiveAll(conn, bytes));
  const seconds = (performance.now() - started) / 1000;
  await conn.close();
  return { seconds, bytes };
}

/** 1-byte ping-pong on one connection: each round trip in µs, in order. */
export async function rtt(path: BenchPath, rounds: number): Promise<number[]> {
  const conn = await LeanConn.open(path);
  conn.write('P');
  const one = Buffer.from([1]);
  const samples = new Array<number>(rounds);
  await deadline(
    'round trips',
    new Promise<void>((resolve) => {
      let i = 0;
      let t0 = 0;
      conn.onBytes = () => {
        samples[i++] = (performance.now() - t0) * 1000;
        if (i === rounds) {
          conn.onBytes = undefined;
          resolve();
          return;
        }
        t0 = performance.now();
        conn.write(one);
      };
      t0 = performance.now();
      conn.write(one);
    }),
  );
  await conn.close();
  return samples;
}

export interface BesideBulkResult {
  /** Round trips of the echo connection while the download ran, in ms, in order. */
  echoMs: number[];
  /** The download's time, from its request to its last byte. */
  seconds: number;
  bytes: number;
}

/**
 * A download of `bytes` and, beside it on a second connection through the same
 * path, one byte echoed every `everyMs` until the download ends: what an
 * interactive session (kubectl exec) sees while a log download shares the link.
 */
export async function echoBesideBulk(path: BenchPath, bytes: number, everyMs: number): Promise<BesideBulkResult> {
  const echo = await LeanConn.open(path);
  echo.write('P');
  const download = await LeanConn.open(path);
  const started = performance.now();
  download.write(bulkRequest(bytes));
  const state = { downloading: true };
  const downloaded = deadline('download', receiveAll(download, bytes)).finally(() => (state.downloading = false));
  const echoMs: number[] = [];
  const one = Buffer.from([1]);
  await deadline(
    'echoes beside the download',
    (async () => {
      while (state.downloading && echoMs.length < 100_000) {
        const t0 = performance.now();
        await new Promise<void>((resolve) => {
          echo.onBytes = () => {
            echo.onBytes = undefined;
            resolve();
          };
          echo.write(one);
        });
        echoMs.push(performance.now() - t0);
        await new Promise((r) => setTimeout(r, everyMs));
      }
    })(),
  );
  await downloaded;
  const seconds = (performance.now() - started) / 1000;
  await Promise.all([download.close(), echo.close()]);
  return { echoMs, seconds, bytes };
}

/**
 * Opens a connection and has one byte echoed; resolves with the time that took
 * (ms), the connection still open. Target modes (bench/target.ts): 'E' closes
 * after the echo, 'H' holds until the client sends again, 'P' echoes on.
 */
async function openAndEcho(path: BenchPath, mode: 'E' | 'H' | 'P'): Promise<{ conn: LeanConn; ms: number }> {
  const t0 = performance.now();
  const conn = await LeanConn.open(path);
  const echoed = receiveAll(conn, 1);
  conn.write(`${mode}!`);
  await echoed;
  return { conn, ms: performance.now() - t0 };
}

/**
 * New connections one after another: CONNECT → 200 → one byte echoed, in ms.
 * The target then closes, and that close is awaited (untimed) before the next.
 * With `dump`, every connection's start (Unix ms, comparable with other
 * processes' clocks) and time are appended to `dump.file` afterwards, one line
 * each: `label index start ms`.
 */
export async function newConnections(path: BenchPath, rounds: number, dump?: { file: string; label: string }): Promise<number[]> {
  const samples: number[] = [];
  const starts: number[] = [];
  await deadline(
    'new connections',
    (async () => {
      for (let i = 0; i < rounds; i++) {
        starts.push(performance.timeOrigin + performance.now());
        const { conn, ms } = await openAndEcho(path, 'E');
        samples.push(ms);
        await conn.closed;
      }
    })(),
  );
  if (dump !== undefined) appendFileSync(dump.file, samples.map((ms, i) => `${dump.label} ${i} ${starts[i]!.toFixed(3)} ${ms.toFixed(3)}\n`).join(''));
  return samples;
}

export interface RateResult {
  connections: number;
  seconds: number;
}

/**
 * Sustained new connections: `concurrency` workers each open, echo one byte,
 * and wait for the connection to close, the close handshake included, then
 * start again. `closeBy` says who closes first: the target (after its echo),
 * or the client (it ends its side and waits for the far side to end).
 */
export async function connectionRate(path: BenchPath, count: number, concurrency: number, closeBy: 'target' | 'client'): Promise<RateResult> {
  let next = 0;
  const started = performance.now();
  await deadline(
    'connection rate',
    Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < count) {
          const { conn } = await openAndEcho(path, closeBy === 'target' ? 'E' : 'P');
          if (closeBy === 'client') await conn.close();
          else await conn.closed;
        }
      }),
    ),
  );
  return { connections: count, seconds: (performance.now() - started) / 1000 };
}

export interface ParallelResult {
  seconds: number;
  bytes: number;
  /** Each flow's bytes when the first flow finished, as a fraction of an equal share. */
  shares: number[];
}

/** `flows` bulk transfers at once on their own connections; fairness is judged while all run. */
export async function parallel(path: BenchPath, flows: number, bytes: number): Promise<ParallelResult> {
  const conns = await Promise.all(Array.from({ length: flows }, () => LeanConn.open(path)));
  let shares: number[] | undefined;
  const started = performance.now();
  const done = conns.map((c) =>
    receiveAll(c, bytes).then(() => {
      if (shares === undefined) {
        const got = conns.map((x) => x.received);
        const fair = got.reduce((a, b) => a + b, 0) / flows;
        shares = got.map((g) => g / fair);
      }
    }),
  );
  for (const c of conns) c.write(bulkRequest(bytes));
  await deadline('parallel flows', Promise.all(done));
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(conns.map((c) => c.close()));
  return { seconds, bytes: bytes * flows, shares: shares! };
}

const held: LeanConn[] = [];

/** Opens `count` connections (each echoes a byte, so it is established end to end) and keeps them open, idle. */
export async function hold(path: BenchPath, count: number, concurrency = 50): Promise<number> {
  let next = 0;
  await deadline(
    'opening idle connections',
    Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < count) held.push((await openAndEcho(path, 'H')).conn);
      }),
    ),
  );
  return held.length;
}

/** Has the target close every connection `hold` opened, and waits until each has closed. */
export async function release(): Promise<number> {
  const all = held.splice(0);
  for (const c of all) c.write('x');
  await deadline('closing idle connections', Promise.all(all.map((c) => c.closed)));
  return all.length;
}

/** Receives `bytes` no faster than `bytesPerSecond` (a reader slower than the tunnel); resolves with the seconds taken. */
export async function slowReader(path: BenchPath, bytes: number, bytesPerSecond: number): Promise<number> {
  const conn = await LeanConn.open(path);
  const { socket } = conn;
  const started = performance.now();
  let resumeTimer: NodeJS.Timeout | undefined;
  await deadline(
    'slow reader',
    new Promise<void>((resolve, reject) => {
      conn.onBytes = () => {
        if (conn.received >= bytes) {
          conn.onBytes = undefined;
          resolve();
          return;
        }
        const allowed = ((performance.now() - started) / 1000) * bytesPerSecond;
        if (conn.received > allowed && resumeTimer === undefined) {
          socket.pause();
          resumeTimer = setTimeout(
            () => {
              resumeTimer = undefined;
              socket.resume();
            },
            Math.max(1, ((conn.received - allowed) / bytesPerSecond) * 1000),
          );
        }
      };
      void conn.closed.then(() => {
        if (conn.received < bytes) reject(new Error(`closed after ${conn.received} of ${bytes} bytes`));
      });
      conn.write(bulkRequest(bytes));
    }),
  ).finally(() => clearTimeout(resumeTimer));
  const seconds = (performance.now() - started) / 1000;
  await conn.close();
  return seconds;
}

export interface PacedResult {
  /** CONNECT → 200 of each dial that succeeded, in ms. */
  dialMs: number[];
  /**
   * CONNECT → the byte sent after the 200 echoed back, in ms: the figure to
   * compare between servers, as Konnectivity v0.30 answers 200 before it dials
   * (its dialMs has no round trip to the agent in it; ours does).
   */
  echoMs: number[];
  failures: number;
  /** The first failure's message, if any. */
  firstError?: string;
  seconds: number;
}

/**
 * New connections at a steady `perSecond` for `seconds`, started on schedule
 * whether or not earlier ones have finished (open loop, as callers arrive).
 * Each: CONNECT → 200 (timed: the dial), one byte echoed, the target closes.
 */
export async function paced(path: BenchPath, perSecond: number, seconds: number): Promise<PacedResult> {
  const total = Math.round(perSecond * seconds);
  const dialMs: number[] = [];
  const echoMs: number[] = [];
  let failures = 0;
  let firstError: string | undefined;
  const inFlight = new Set<Promise<void>>();
  const started = performance.now();
  for (let i = 0; i < total; i++) {
    const due = started + (i * 1000) / perSecond;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const t0 = performance.now();
    const one = (async () => {
      try {
        const conn = await LeanConn.open(path);
        dialMs.push(performance.now() - t0);
        conn.onBytes = () => {
          conn.onBytes = undefined;
          echoMs.push(performance.now() - t0);
        };
        conn.write('E!');
        await deadline('a paced connection', conn.closed, 30_000);
      } catch (err: unknown) {
        failures++;
        firstError ??= err instanceof Error ? err.message : String(err);
      }
    })();
    inFlight.add(one);
    void one.then(() => inFlight.delete(one));
  }
  await deadline('paced connections', Promise.all(inFlight));
  return { dialMs, echoMs, failures, ...(firstError !== undefined ? { firstError } : {}), seconds: (performance.now() - started) / 1000 };
}
