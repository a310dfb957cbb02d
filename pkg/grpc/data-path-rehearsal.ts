// What the server's and the agent's start-up rehearsals share (pkg/server/
// rehearsal.ts, pkg/agent/rehearsal.ts). A fresh process ran its first
// connection and round trips in V8's interpreter while TurboFan compiled the
// data path on the same two cores; with --startup-rehearsal each process
// drives its own real half of the path for a moment before it reports ready.
// Off by default: re-measured on a loaded 2-core machine (npm run bench --
// cold-start, 3 rounds alternated), it added 1.1-3.4 s from start to ready
// (1.1-2.0 s -> 3.1-5.4 s) to buy the first connection (23-82 -> 5-28 ms) and
// the first 2,000 round trips' p99 (3.8-7.9 -> 0.8-7.1 ms). Here: a private link between two in-process ends over a
// loopback TCP socket with TLS (the process's own certificate), HTTP/2 and the
// gRPC packet calls, an echo target, a stand-in relay for the half the process
// does not run, and the step that runs a rehearsal and logs what it took.
// Nothing here is reachable from outside: everything listens on 127.0.0.1,
// port 0, and is closed before the rehearsal resolves.

import { createHash, X509Certificate } from 'node:crypto';
import { once } from 'node:events';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type ServerHttp2Stream } from 'node:http2';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Logger } from '../log/logger.js';
import type { Registry } from '../metrics/prom.js';
import { AGENT_CLOSE, SERVER_CLOSE } from '../mux/close-handshake.js';
import type { PacketLink } from '../mux/packet-link.js';
import { SocketRelay, type SocketRelayOptions } from '../mux/socket-relay.js';
import { errorMessage, RehearsalError } from '../protocol/errors.js';
import type { Packet } from '../protocol/packet.js';
import { startCall } from './client-call-head.js';
import { AGENT_CONNECT_PATH } from './services.js';

/**
 * Defaults: enough round trips for TurboFan to compile the per-packet functions.
 * 1,000 rather than 200 per connection: once
 * nothing threw the rehearsal's code away any more, the longer pass brought the
 * cold p99 from ~1.6 to ~0.55 ms for ~0.25 s more CPU at start per process.
 */
export const REHEARSAL_CONNECTIONS = 3;
export const REHEARSAL_ROUND_TRIPS = 1000;
/** A rehearsal that takes longer than this is abandoned (start-up goes on). */
export const REHEARSAL_DEADLINE_MS = 10_000;

export interface RehearsalOptions {
  /** Connections, one after another. */
  connections?: number;
  /** 1-byte round trips on each. */
  roundTrips?: number;
  /**
   * The process's own certificate and key: the rehearsal's link runs over TLS
   * with it, as the real one does. The client pins that very certificate
   * rather than checking a chain (an agent's client certificate need not
   * chain to a CA it holds; it dials itself on 127.0.0.1).
   */
  tls?: { cert: string; key: string };
  /** Where the rehearsal's own counters go: a registry nobody serves (a fresh one when not given; tests read it). */
  metricsRegistry?: Registry;
}

export interface RehearsalResult {
  connections: number;
  roundTrips: number;
  ms: number;
}

/** The agent's half of a tunnelled connection, for the server's rehearsal: ends with CLOSE_RSP, as the agent's does. */
export class StandInRelay extends SocketRelay {
  constructor(link: PacketLink, connectID: bigint, opts?: SocketRelayOptions) {
    super(link, connectID, AGENT_CLOSE, opts);
  }
}

/** The server's half, for the agent's rehearsal: asks for the close with CLOSE_REQ and waits for CLOSE_RSP, as the server's does. */
export class StandInServerRelay extends SocketRelay {
  constructor(link: PacketLink, connectID: bigint, opts?: SocketRelayOptions) {
    super(link, connectID, SERVER_CLOSE, opts);
  }
}

/** A byte that has the echo target end its side once it has echoed it. */
const TARGET_ENDS = 0;

/**
 * Ends a rehearsal connection: the caller first, or (`byTarget`) the echo
 * target first. Each order sends packets the other does not (CLOSE_WRITE from
 * the agent, CLOSE_REQ to it), of object shapes of their own: rehearsing one
 * only left the first real connection ended the other way to throw away the
 * packet handlers' optimised code ('wrong map', 'insufficient type feedback').
 */
export function endConnection(caller: Socket, byTarget: boolean): void {
  if (byTarget) caller.write(Buffer.from([TARGET_ENDS]));
  else caller.end();
}

/** Hands a link's DATA, WINDOW_UPDATE, CLOSE_WRITE and close packets to the relay of their connectID. */
export function routeToRelays(relays: ReadonlyMap<bigint, SocketRelay>, p: Packet): void {
  if (p.type === 'DATA') relays.get(p.connectID)?.deliver(p.data);
  else if (p.type === 'WINDOW_UPDATE') relays.get(p.connectID)?.grantCredit(Number(p.bytes));
  else if (p.type === 'CLOSE_WRITE') relays.get(p.connectID)?.remoteEndWrite();
  else if (p.type === 'CLOSE_RSP' || p.type === 'CLOSE_REQ') relays.get(p.connectID)?.remoteClose();
}

/** The private link: the agent's session and request and the server's stream of one call, an echo target, and what closes it all. */
export interface RehearsalLink {
  session: ClientHttp2Session;
  /** The agent's socket beneath its session. */
  socket: Socket;
  request: ClientHttp2Stream;
  stream: ServerHttp2Stream;
  /** 127.0.0.1:<port> of a TCP echo target. */
  targetAddress: string;
  /** A connected loopback TCP pair: a caller's socket, and the one the server side holds. */
  callerPair(): Promise<[caller: Socket, accepted: Socket]>;
  /** Registers a socket to be destroyed by close() if still open. */
  track(socket: Socket): Socket;
  close(): Promise<void>;
}

async function listenLoopback(server: Server | http2.Http2Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

function closeServer(server: Server | http2.Http2Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** Opens the private link; `metadata` is what the agent's call announces (flow control, half-close, resume). */
export async function openRehearsalLink(tls: RehearsalOptions['tls'], metadata: Record<string, string>): Promise<RehearsalLink> {
  const sockets = new Set<Socket>();
  const track = (s: Socket): Socket => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
    s.on('error', () => {});
    return s;
  };
  const target = createServer((s) => {
    track(s).pipe(s);
    s.on('data', (b: Buffer) => {
      if (b[b.length - 1] === TARGET_ENDS) s.end();
    });
  });
  const callers = createServer();
  const settings = { initialWindowSize: 4 * 1024 * 1024 };
  const h2 = tls === undefined ? http2.createServer({ settings }) : http2.createSecureServer({ settings, cert: tls.cert, key: tls.key });
  h2.on('connection', (s: Socket) => track(s));
  h2.on('secureConnection', (s: Socket) => track(s));
  let client: http2.ClientHttp2Session | undefined;
  const close = async (): Promise<void> => {
    client?.destroy();
    for (const s of sockets) s.destroy();
    await Promise.all([closeServer(target), closeServer(callers), closeServer(h2)]);
  };
  try {
    const [targetPort, callerPort, h2Port] = await Promise.all([listenLoopback(target), listenLoopback(callers), listenLoopback(h2)]);
    const serverStream = once(h2, 'stream') as Promise<[ServerHttp2Stream]>;
    client =
      tls === undefined
        ? http2.connect(`http://127.0.0.1:${h2Port}`, { settings })
        : http2.connect(`https://127.0.0.1:${h2Port}`, { settings, rejectUnauthorized: false });
    client.on('error', () => {});
    const [, socket] = (await once(client, 'connect')) as [ClientHttp2Session, Socket];
    if (tls !== undefined) {
      const pinned = new X509Certificate(tls.cert).fingerprint256;
      if ((socket as TLSSocket).getPeerX509Certificate()?.fingerprint256 !== pinned) {
        throw new RehearsalError('the rehearsal reached a listener that is not its own (its certificate differs)');
      }
    }
    const request = startCall(client, AGENT_CONNECT_PATH, metadata, 'yurt-tunnel-rehearsal');
    const [stream] = await serverStream;
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    await once(request, 'response');
    const callerPair = async (): Promise<[Socket, Socket]> => {
      const accepted = once(callers, 'connection') as Promise<[Socket]>;
      const caller = track(connect({ port: callerPort, host: '127.0.0.1', noDelay: true }));
      const [serverSide] = await accepted;
      return [caller, track(serverSide)];
    };
    return { session: client, socket, request, stream, targetAddress: `127.0.0.1:${targetPort}`, callerPair, track, close };
  } catch (err: unknown) {
    await close();
    throw err;
  }
}

/** Sends one byte on `socket` and waits for it back, `rounds` times. */
export function echoRoundTrips(socket: Socket, rounds: number, what: string): Promise<void> {
  const one = Buffer.from([1]);
  return new Promise<void>((resolve, reject) => {
    let left = rounds;
    const onData = (): void => {
      if (--left > 0) {
        socket.write(one);
        return;
      }
      socket.off('data', onData);
      socket.off('close', onClose);
      resolve();
    };
    const onClose = (): void => reject(new RehearsalError(`${what} closed after ${rounds - left} of ${rounds} round trips`));
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.write(one);
  });
}

/** Resolves once `socket` has closed. */
export function untilClosed(socket: Socket): Promise<void> {
  if (socket.destroyed) return Promise.resolve();
  return new Promise((resolve) => socket.once('close', () => resolve()));
}

/** Rejects with a timeout error unless `work` settles within REHEARSAL_DEADLINE_MS. */
export async function withinDeadline<T>(work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new RehearsalError(`did not finish within ${REHEARSAL_DEADLINE_MS} ms`)), REHEARSAL_DEADLINE_MS);
    timer.unref();
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** How much one pass drives. */
export interface RehearsalSize {
  connections: number;
  roundTrips: number;
}

/**
 * A short pass, then the full one. The first pass's teardown is the first
 * time the path's objects are closed for good (links, calls, sessions): the
 * fields that changes stop being constants for V8, and every function
 * optimised with them as constants is thrown away ("code dependencies"). The
 * full pass then optimises code that already knows, and its own teardown
 * throws nothing away; with one pass, a third of what it optimised was
 * compiled again during the first caller's round trips.
 */
export const REHEARSAL_PASSES: readonly RehearsalSize[] = [
  { connections: 1, roundTrips: 20 },
  { connections: REHEARSAL_CONNECTIONS, roundTrips: REHEARSAL_ROUND_TRIPS },
];

/**
 * What V8 is told around the passes (the CLIs give cmd/common/v8-tiering.ts's):
 * begin() makes it optimise sooner, end() puts back the process's setting,
 * also when a pass fails. Most of what the first caller's round trips still
 * compiled were small per-packet functions (metrics, packet handlers, write
 * callbacks) that the passes' ~1,300 packets had not made hot enough on
 * their own.
 */
export interface RehearsalTiering {
  begin(): void;
  end(): void;
}

/**
 * Logged after the short pass, before the full one. Not only for the reader:
 * the process's log lines go through the same stream code as the data path
 * (Writable.write, Socket._write, ...) with streams of other shapes (the
 * logger's, stdout's), and the first line written after a rehearsal that had
 * none threw that code away ("wrong map") for the first caller's round trips
 * to compile again. Written here, the full pass optimises it knowing them.
 */
export const SHORT_PASS_DONE = 'start-up rehearsal of the data path: short pass done';

/**
 * Makes one Buffer the way Node's C++ side does (a plain Uint8Array given
 * Buffer's prototype afterwards), before the passes. The first such Buffer
 * moves an object off V8's plain Uint8Array map, and code relying on that map
 * staying put is thrown away: Node's tick queue and stream internals
 * (process.nextTick, processTicksAndRejections, setHasTickScheduled: they
 * store into a Uint8Array), and with them whatever inlined them. The real
 * link's TLS handshake (checking the server's certificate) made the first one,
 * after the rehearsal had optimised all of that.
 */
export function settleBufferMaps(): void {
  createHash('sha256').update('').digest();
}

/**
 * The start-up step: runs `rehearse` for each pass and logs what it took; a
 * failure is logged and start-up goes on (it costs only the first callers
 * their speed).
 */
export async function runStartupRehearsal(
  log: Logger,
  rehearse: (size: RehearsalSize) => Promise<RehearsalResult>,
  tiering?: RehearsalTiering,
): Promise<RehearsalResult | undefined> {
  const started = performance.now();
  settleBufferMaps();
  try {
    const total = { connections: 0, roundTrips: 0, ms: 0 };
    tiering?.begin();
    try {
      for (const [i, size] of REHEARSAL_PASSES.entries()) {
        const r = await rehearse(size);
        total.connections += r.connections;
        total.roundTrips += r.connections * r.roundTrips;
        if (i === 0) log.info(SHORT_PASS_DONE, { connections: r.connections, roundTrips: r.roundTrips, ms: Math.round(performance.now() - started) });
      }
    } finally {
      tiering?.end();
    }
    total.ms = performance.now() - started;
    log.info('start-up rehearsal of the data path done', { connections: total.connections, roundTrips: total.roundTrips, ms: Math.round(total.ms) });
    return total;
  } catch (err: unknown) {
    log.warn('start-up rehearsal of the data path failed; starting anyway (the first connections will be slower)', {
      error: errorMessage(err),
      hint: '--startup-rehearsal=false turns it off',
    });
    return undefined;
  }
}
