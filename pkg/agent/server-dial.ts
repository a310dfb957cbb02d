// Dials one tunnel server: an HTTP/2 connection over mutual TLS that checks
// the server's name, and the `AgentService/Connect` call, up to the server's
// response headers. Who carries the call on (a new link, or a suspended
// session it resumes) is decided from those headers by the caller, before it
// reads any packet. The start of a dial (the TCP connection, TLS) and the
// reading of the server's answer are the WebSocket's too (server-dial-ws.ts):
// the two transports differ only from TLS's ALPN on.

import { addAbortListener } from 'node:events';
import http2, { type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { isIP, type Socket } from 'node:net';
import { checkServerIdentity, connect as tlsConnect, type PeerCertificate, type TLSSocket } from 'node:tls';
import { responseRefusal, startCall } from '../grpc/client-call-head.js';
import { metadataValues } from '../grpc/metadata.js';
import { AGENT_CONNECT_PATH } from '../grpc/services.js';
import type { Logger } from '../log/logger.js';
import { errorMessage } from '../protocol/errors.js';
import { ProxyError, ServerConnectionError } from './errors.js';
import { openServerSocket } from './proxy/open-server-socket.js';
import { proxyFor, type ProxyConfig } from './proxy/proxy-config.js';
import { CONN_WINDOW_HEADER, parseConnWindow, type FlowWindows } from '../protocol/flow-control.js';
import { HALF_CLOSE_HEADER, announcesHalfClose } from '../protocol/half-close.js';
import { PROBE_HEADER } from '../protocol/probe.js';
import {
  RESUMED_HEADER,
  RESUME_HEADER,
  SESSION_HEADER,
  formatSessionClaim,
  parseSessionOffer,
  type SessionClaim,
  type SessionOffer,
} from '../protocol/resume.js';
import { splitHostPort } from '../net/host-port.js';
import type { AgentTransport } from './transport.js';
import { isUntrustedChain, opensslReason, presentedCertificate, untrustedChainHint, wrongPortHint } from './server-dial-hints.js';

/** A server that refuses our certificate closes within this long of the TLS handshake (TLS 1.3 reports no alert). */
const CERT_REFUSAL_WINDOW_MS = 1000;

/** SNI sent when the server is addressed by IP (servers select no certificate by it). */
const IP_TARGET_SNI = 'yurt-tunnel-server';

export interface AgentTLS {
  /** CA bundle that signs the server's certificate. */
  ca: string;
  cert: string;
  key: string;
}

/** The server's identity, from its response headers. */
export interface ServerIdentity {
  serverID: string;
  serverCount: number;
  /** Per-connection flow control, when the server agreed to it. */
  flow: FlowWindows | undefined;
  /** Half-close (CLOSE_WRITE), when the server agreed to it. */
  halfClose: boolean;
}

export interface DialTarget {
  address: string;
  /** Name checked in the server's certificate. */
  verifyName: string;
  tls: AgentTLS;
  agentID: string;
  identifiers: string;
  /** HTTP/2 receive window per stream (connection: 4×). */
  receiveWindow: number;
  /** Our flow control window; 0 does not announce it. */
  connWindow: number;
  halfClose: boolean;
  handshakeTimeoutMs: number;
  /**
   * Gives up a direct TCP connect that has not connected within this long
   * (undefined: the handshake timeout bounds it). Set while a session waits
   * to resume (client-set.ts): Linux resends an unanswered SYN only after
   * 1 s and 3 s more (before 6.5; since, the first four every second), so
   * after a blip of the path one dial would wait out most of the resume
   * window on a SYN that was dropped, where a new dial sends a new SYN at
   * once. Through a proxy the socket is ready only once the proxy has
   * connected and answered: no such bound there.
   */
  connectTimeoutMs?: number;
  /** Session resume: our window, and the sessions we ask back. */
  resume: { windowMs: number; claims: SessionClaim[] } | undefined;
  /** We hold links to every server we know of: this dial looks for another (protocol/probe.ts). */
  probe?: boolean;
  /** The HTTP or SOCKS proxy the server is reached through (undefined: directly). */
  proxy?: ProxyConfig;
  /** gRPC, a WebSocket, or gRPC falling back to a WebSocket (transport-choice.ts). Default auto. */
  transport?: AgentTransport;
}

/** What the server's answer says, on either transport: who it is and the session it offers. */
export interface ServerAnswer {
  identity: ServerIdentity;
  /** The session the server offers (undefined: resume is off for this call). */
  offer: SessionOffer | undefined;
}

/** A gRPC call the server answered: its connection, its stream (not read yet), and what the headers said. */
export interface GrpcDialedCall extends ServerAnswer {
  transport: 'grpc';
  session: ClientHttp2Session;
  /**
   * The TLS socket beneath: destroying a session whose socket the peer
   * half-closed can leave the socket open (seen under blips), so the owner
   * destroys both.
   */
  socket: Socket | undefined;
  stream: ClientHttp2Stream;
}

export async function dialServer(t: DialTarget, log: Logger, signal?: AbortSignal): Promise<GrpcDialedCall> {
  const { target, authority, socket } = await openBeneath(t, signal);
  const { session, beneath } = connectSession(t, authority, socket, log);
  return new Promise<GrpcDialedCall>((resolve, reject) => {
    let settled = false;
    /** When TLS was established; a close within a moment of it is how a server refuses a client certificate. */
    let securedAt: number | undefined;
    /** A connection error, with what to do when it tells us the agent reached the wrong port or server. */
    const failOn = (err: Error): void => {
      if (settled) return;
      const hint = wrongPortHint(err);
      if (hint !== undefined) return fail(`${hint} (${opensslReason(err)})`, err);
      if (!isUntrustedChain(err)) return fail(errorMessage(err), err);
      if (explaining) return;
      // The close that follows is this error's; the timer and the signal still end the wait.
      explaining = true;
      // Through a proxy, a second look would dial around it.
      const proxied = proxyFor(t.proxy, target.host, target.port) !== undefined;
      void (proxied ? Promise.resolve(undefined) : presentedCertificate({ ...target, servername: sniFor(t.verifyName) }, t.handshakeTimeoutMs, signal)).then(
        (presented) => fail(`${untrustedChainHint(presented)} (${errorMessage(err)})`, err),
      );
    };
    const onError = (err: Error): void => failOn(err);
    let explaining = false;
    const onClose = (): void => {
      if (settled || explaining) return;
      const err = connectFailed(t, closeReason(securedAt));
      if (securedAt === undefined) failedBeforeTls.add(err);
      settle(err);
    };
    const settle = (err: Error | undefined, call?: GrpcDialedCall): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      // onError stays: errors after the answer are the owner's to log, but one must never go unheard.
      session.off('close', onClose);
      if (err !== undefined) {
        session.destroy();
        reject(err);
      } else {
        resolve(call!);
      }
    };
    const fail = (text: string, cause?: Error): void => settle(connectFailed(t, text, cause));
    const timer = setTimeout(() => settle(handshakeTimeout(t)), t.handshakeTimeoutMs);
    timer.unref();
    session.once('connect', () => (securedAt = performance.now()));
    whenStopping(t, signal, settle);
    session.on('error', onError);
    session.once('close', onClose);

    let stream: ClientHttp2Stream;
    try {
      stream = startCall(session, AGENT_CONNECT_PATH, callMetadata(t), 'yurt-tunnel-agent');
    } catch (err: unknown) {
      fail(errorMessage(err));
      return;
    }
    stream.on('error', (err: Error) => {
      // A call cancelled because its connection failed (ERR_HTTP2_STREAM_CANCEL) carries the connection's error as its cause: that is the news.
      failOn(err.cause instanceof Error ? err.cause : err);
    });
    stream.once('response', (h: IncomingHttpHeaders, _flags: number, raw: string[]) => {
      const answer = readAnswer(t, h, raw);
      if (answer instanceof Error) settle(answer);
      else settle(undefined, { transport: 'grpc', session, socket: beneath.socket, stream, ...answer });
    });
  });
}

/**
 * The start of a dial on either transport: the address as host:port (and as
 * a URL's authority), and the TCP connection beneath TLS.
 */
export async function openBeneath(
  t: DialTarget,
  signal: AbortSignal | undefined,
): Promise<{ target: { host: string; port: number }; authority: string; socket: Socket }> {
  const target = splitHostPort(t.address);
  if (target === undefined) {
    throw new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server address ${t.address} is not host:port`);
  }
  const authority = isIP(target.host) === 6 ? `[${target.host}]:${target.port}` : `${target.host}:${target.port}`;
  return { target, authority, socket: await serverSocket(t, target, signal) };
}

/**
 * The TCP connection beneath TLS, direct or through the proxy, within the
 * handshake timeout (a direct one within `connectTimeoutMs` when given). A
 * proxy's refusal stays a ProxyError naming the proxy.
 */
async function serverSocket(t: DialTarget, target: { host: string; port: number }, signal: AbortSignal | undefined): Promise<Socket> {
  const ending = new AbortController();
  const direct = proxyFor(t.proxy, target.host, target.port) === undefined;
  const connectMs = direct && t.connectTimeoutMs !== undefined && t.connectTimeoutMs < t.handshakeTimeoutMs ? t.connectTimeoutMs : undefined;
  const timer = setTimeout(() => ending.abort(connectMs === undefined ? handshakeTimeout(t) : connectTimeout(t, connectMs)), connectMs ?? t.handshakeTimeoutMs);
  timer.unref();
  const stopped = whenStopping(t, signal, (err) => ending.abort(err));
  try {
    return await openServerSocket(target, t.proxy, ending.signal);
  } catch (err: unknown) {
    if (err instanceof ServerConnectionError || err instanceof ProxyError) throw err;
    throw connectFailed(t, errorMessage(err), err instanceof Error ? err : undefined);
  } finally {
    clearTimeout(timer);
    stopped?.[Symbol.dispose]();
  }
}

/**
 * Calls `stop` once `signal` aborts (at once if it has), with its reason when
 * that is a ServerConnectionError, else "the agent is stopping"; disposing
 * stops listening.
 */
export function whenStopping(t: DialTarget, signal: AbortSignal | undefined, stop: (err: ServerConnectionError) => void): Disposable | undefined {
  const onAbort = (): void => stop(signal?.reason instanceof ServerConnectionError ? signal.reason : connectFailed(t, 'the agent is stopping'));
  if (signal?.aborted === true) onAbort();
  else if (signal !== undefined) return addAbortListener(signal, onAbort);
  return undefined;
}

/** TLS to the server over `beneath`: our client certificate, the server's name checked, `alpn` offered. */
export function tlsOver(t: DialTarget, beneath: Socket, alpn: 'h2' | 'http/1.1'): TLSSocket {
  return tlsConnect({
    socket: beneath,
    ca: t.tls.ca,
    cert: t.tls.cert,
    key: t.tls.key,
    // TLS SNI must be a DNS name (Node deprecates IPs there); for an IP address send a fixed name instead.
    servername: sniFor(t.verifyName),
    checkServerIdentity: (_name: string, cert: PeerCertificate) => checkServerIdentity(t.verifyName, cert),
    ALPNProtocols: [alpn],
  });
}

function handshakeTimeout(t: DialTarget): ServerConnectionError {
  return new ServerConnectionError('YT_ERR_HANDSHAKE_TIMEOUT', `no response from tunnel server ${t.address} within ${t.handshakeTimeoutMs} ms`);
}

/** A TCP connect given up by `connectTimeoutMs`: the path, not the transport, failed. */
function connectTimeout(t: DialTarget, ms: number): ServerConnectionError {
  const err = connectFailed(t, `no TCP connection within ${ms} ms while a session waits to resume (dialling again)`);
  failedBeforeTls.add(err);
  return err;
}

/** Opens the HTTP/2 connection to the server over `socket`; `beneath.socket` is its TLS socket once connected. */
function connectSession(
  t: DialTarget,
  authority: string,
  socket: Socket,
  log: Logger,
): { session: ClientHttp2Session; beneath: { socket: Socket | undefined } } {
  const session = http2.connect(`https://${authority}`, {
    createConnection: () => tlsOver(t, socket, 'h2'),
    maxSessionMemory: 64,
    settings: { initialWindowSize: t.receiveWindow, enablePush: false },
  });
  const beneath: { socket: Socket | undefined } = { socket: undefined };
  session.once('connect', (_session: ClientHttp2Session, s: Socket) => {
    beneath.socket = s;
    try {
      session.setLocalWindowSize(t.receiveWindow * 4);
    } catch (err: unknown) {
      log.warn('could not raise the HTTP/2 connection window', { error: errorMessage(err) });
    }
  });
  return { session, beneath };
}

export function connectFailed(t: DialTarget, text: string, cause?: Error): ServerConnectionError {
  return new ServerConnectionError('YT_ERR_CONNECT_FAILED', `tunnel server ${t.address}: ${text}`, { cause });
}

/**
 * Refusals the server itself sent, with a gRPC status (as a trailers-only
 * answer, or a refused WebSocket upgrade's grpc-status): the transport
 * worked, so `--transport auto` does not try the other one for them.
 */
export const refusedByServer = new WeakSet<Error>();

/**
 * Dials that failed before TLS was established (a connection closed during
 * the handshake, a TCP connect given up): nothing about HTTP/2 was said yet,
 * and a WebSocket would meet the same, so `--transport auto` does not try it
 * for them (an L7 balancer refusing h2 answers ALPN with an alert, an error
 * of its own).
 */
export const failedBeforeTls = new WeakSet<Error>();

/** Why the connection closed before the server answered, judged by when TLS was established. */
function closeReason(securedAt: number | undefined): string {
  if (securedAt === undefined) return 'the connection closed during the TLS handshake';
  if (performance.now() - securedAt < CERT_REFUSAL_WINDOW_MS) {
    return (
      "the server closed the connection right after the TLS handshake: it most likely does not trust this agent's " +
      'client certificate (issued by a CA other than the one the server was given)'
    );
  }
  return 'the connection closed before the server answered the call';
}

/** The server's answer to the call: who it is and the session it offers, or why the answer cannot be used. */
function readAnswer(t: DialTarget, h: IncomingHttpHeaders, raw: string[]): ServerAnswer | Error {
  const refusal = responseRefusal(h);
  if (refusal !== undefined) {
    const err = connectFailed(t, `refused the call (${refusal})`);
    if (h['grpc-status'] !== undefined) refusedByServer.add(err);
    return err;
  }
  return readAccepted(t, raw);
}

/** What an accepting answer's metadata says: who the server is and the session it offers. */
export function readAccepted(t: DialTarget, raw: string[]): ServerAnswer | Error {
  const identity = identityFrom(t, raw);
  if (identity instanceof Error) return identity;
  if (t.resume === undefined) return { identity, offer: undefined };
  const parsed = parseSessionOffer(metadataValues(raw, RESUME_HEADER), metadataValues(raw, SESSION_HEADER), metadataValues(raw, RESUMED_HEADER));
  if (parsed instanceof Error) {
    return new ServerConnectionError('YT_ERR_BAD_HEADERS', `tunnel server ${t.address}: ${parsed.message}`, { cause: parsed });
  }
  // Acknowledgements ride on WINDOW_UPDATE: no resume without flow control and half-close.
  return { identity, offer: identity.flow !== undefined && identity.halfClose ? parsed : undefined };
}

function sniFor(verifyName: string): string {
  return isIP(verifyName) === 0 ? verifyName : IP_TARGET_SNI;
}

export function callMetadata(t: DialTarget): Record<string, string | string[]> {
  const md: Record<string, string | string[]> = { agentid: t.agentID };
  if (t.identifiers !== '') md.agentidentifiers = t.identifiers;
  if (t.connWindow > 0) md[CONN_WINDOW_HEADER] = String(t.connWindow);
  if (t.halfClose) md[HALF_CLOSE_HEADER] = '1';
  if (t.probe === true) md[PROBE_HEADER] = '1';
  if (t.resume !== undefined && t.connWindow > 0 && t.halfClose) {
    md[RESUME_HEADER] = String(t.resume.windowMs);
    if (t.resume.claims.length > 0) md[SESSION_HEADER] = t.resume.claims.map(formatSessionClaim);
  }
  return md;
}

/** The server's identity from its response metadata. */
function identityFrom(t: DialTarget, raw: string[]): ServerIdentity | ServerConnectionError {
  const ids = metadataValues(raw, 'serverid');
  const counts = metadataValues(raw, 'servercount');
  const serverCount = counts.length === 1 && /^\d+$/.test(counts[0]!) ? Number(counts[0]) : NaN;
  if (ids.length !== 1 || ids[0] === '' || Number.isNaN(serverCount)) {
    return new ServerConnectionError(
      'YT_ERR_BAD_HEADERS',
      `tunnel server ${t.address} sent no usable serverid/servercount headers ` + `(serverid=${JSON.stringify(ids)}, servercount=${JSON.stringify(counts)})`,
    );
  }
  const serverWindow = t.connWindow > 0 ? parseConnWindow(metadataValues(raw, CONN_WINDOW_HEADER)) : undefined;
  const flow = serverWindow !== undefined ? { sendWindow: serverWindow, receiveWindow: t.connWindow } : undefined;
  const halfClose = t.halfClose && announcesHalfClose(metadataValues(raw, HALF_CLOSE_HEADER));
  // Upstream: a count of 0 means "unknown", treated as 1.
  return { serverID: ids[0]!, serverCount: serverCount === 0 ? 1 : serverCount, flow, halfClose };
}
