// Replays every request kube-apiserver v1.24 sent to a kubelet (recorded in
// test/fixtures/kube-apiserver/kubelet-requests.json) the way kube-apiserver
// sends it: TLS without SNI, its kubelet client certificate, the same ALPN
// offer, the same header lines in the same order. The answers must match
// what the recording shows. The route says where the requests go (the
// stand-in kubelet itself, or the tunnel's master port in front of it) and
// what the kubelet then sees.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import type { TLSSocket } from 'node:tls';
import { kubeAPIServerFixture } from './fixtures.js';
import { harness, type Harness } from './harness.js';
import { testPKI } from './pki.js';
import {
  ChannelWebSocketClient,
  ChunkedDecoder,
  StandinKubelet,
  dialTLS,
  headerValue,
  readBody,
  readResponseHead,
  readToEnd,
  requestHead,
  type RecordedRequest,
  type ResponseHead,
  type SpdyHeaders,
} from './standin-kubelet/index.js';
import { SpdyFrameParser } from './standin-kubelet/spdy-frames.js';
import { HeaderDecompressor } from './standin-kubelet/spdy-headers.js';

/** Every test is bounded in time. */
const LIMIT = { timeout: 30_000 };

/** What the kubelet records for one request. */
export interface KubeletView {
  headers: Array<[string, string]>;
  subject: { commonName: string; organizations: string[] };
  servername: string | false;
  alpn: string | false;
}

/** Where replayed requests go, and what the kubelet then sees. */
export interface ReplayRoute {
  kubelet: StandinKubelet;
  /** The port kube-apiserver's requests are sent to. */
  port: number;
  kubeletSees(ex: FixtureExchange, sent: Array<[string, string]>): KubeletView;
}

/** Sets up a route for one test; `acceptV5` makes the kubelet take WebSocket v5 (else it plays v1.24). */
export type StartRoute = (h: Harness, acceptV5: boolean) => Promise<ReplayRoute>;

/** The stand-in's options that the recordings need. */
export function recordedKubeletOptions(acceptV5: boolean): { followIntervalMs: number; execWebSocketProtocols?: string[] } {
  // The recording's stand-in played a v1.24 kubelet (refusing v5) except in the *-v5-accepted cases.
  return { followIntervalMs: 20, ...(acceptV5 ? {} : { execWebSocketProtocols: ['v4.channel.k8s.io'] }) };
}

export interface FixtureExchange {
  request: { method: string; target: string; httpVersion: string; headers: Array<[string, string]> };
  tlsClientSubject: string;
  tls: { alpnNegotiated: string | null; clientHelloSni: string | null; clientHelloAlpnOffered: string[] | null };
  response: { status: number; reason: string; headers: Array<[string, string]>; bodyPreview?: string; raw?: string };
  afterUpgradeHex?: string;
  afterUpgradeSpdyFrames?: Array<{ type: string; streamId: number }>;
  standinSentAfterUpgrade?: string[];
  standinObserved?: Array<{ event: string }>;
}

interface FixtureEntry extends FixtureExchange {
  case: string;
  laterExchanges?: FixtureExchange[];
}

// --- the identity kube-apiserver presents -----------------------------------

const certs = new Map<string, { cert: string; key: string }>();

/** A client certificate with the recorded subject, e.g. "O=system:masters,CN=kube-apiserver-kubelet-client". */
function clientCertFor(subject: string): { cert: string; key: string } {
  let pair = certs.get(subject);
  if (pair === undefined) {
    const parts = subject.split(',').map((p) => p.split('=') as [string, string]);
    pair = testPKI().issue({
      commonName: parts.find(([k]) => k === 'CN')?.[1] ?? '',
      organizations: parts.filter(([k]) => k === 'O').map(([, v]) => v),
      usages: ['clientAuth'],
    });
    certs.set(subject, pair);
  }
  return pair;
}

export function expectedSubject(subject: string): { commonName: string; organizations: string[] } {
  const parts = subject.split(',').map((p) => p.split('=') as [string, string]);
  return { commonName: parts.find(([k]) => k === 'CN')?.[1] ?? '', organizations: parts.filter(([k]) => k === 'O').map(([, v]) => v) };
}

// --- helpers -----------------------------------------------------------------

const SESSION = randomUUID();

function fillPlaceholders(value: string, kubelet: StandinKubelet): string {
  const out = value
    .replaceAll('<kube-apiserver-port>', '6443')
    .replaceAll('<kubelet-port>', String(kubelet.port))
    .replaceAll('<kubectl-session-uuid>', SESSION);
  assert.doesNotMatch(out, /<[a-z-]+>/, `unhandled placeholder in ${value}`);
  return out;
}

async function dialAsApiserver(h: Harness, route: ReplayRoute, ex: FixtureExchange): Promise<TLSSocket> {
  const { cert, key } = clientCertFor(ex.tlsClientSubject);
  const socket = await dialTLS({
    host: '127.0.0.1',
    port: route.port,
    ca: testPKI().ca.cert,
    cert,
    key,
    servername: '', // an IP address: kube-apiserver sends no SNI
    ...(ex.tls.clientHelloAlpnOffered !== null ? { ALPNProtocols: ex.tls.clientHelloAlpnOffered } : {}),
  });
  h.defer(() => socket.destroy());
  return socket;
}

function send(socket: TLSSocket, kubelet: StandinKubelet, ex: FixtureExchange): Array<[string, string]> {
  const headers = ex.request.headers.map(([k, v]): [string, string] => [k, fillPlaceholders(v, kubelet)]);
  assert.equal(ex.request.httpVersion, '1.1');
  socket.write(requestHead(ex.request.method, ex.request.target, headers));
  return headers;
}

function assertRecorded(route: ReplayRoute, rec: RecordedRequest | undefined, ex: FixtureExchange, sent: Array<[string, string]>): void {
  assert.ok(rec, 'the stand-in recorded the request');
  assert.equal(rec.method, ex.request.method);
  assert.equal(rec.target, ex.request.target);
  const want = route.kubeletSees(ex, sent);
  assert.deepEqual(rec.headers, want.headers, 'header lines arrive in the order and spelling expected');
  assert.deepEqual(rec.clientSubject, want.subject);
  assert.equal(rec.tlsServername, want.servername);
  assert.equal(rec.alpnProtocol, want.alpn);
}

/** Every recorded response header except Date must be there with the same value. */
function assertHeaders(head: ResponseHead, ex: FixtureExchange): void {
  assert.equal(head.status, ex.response.status, `status for ${ex.request.method} ${ex.request.target}`);
  for (const [name, value] of ex.response.headers) {
    if (name.toLowerCase() === 'date') continue;
    assert.equal(headerValue(head, name), value, `response header ${name}`);
  }
}

// --- one exchange ------------------------------------------------------------

async function replayExchange(h: Harness, route: ReplayRoute, ex: FixtureExchange): Promise<void> {
  const { kubelet } = route;
  const socket = await dialAsApiserver(h, route, ex);
  const before = kubelet.requests.length;
  const sent = send(socket, kubelet, ex);

  if (ex.response.raw !== undefined) {
    // A refused WebSocket handshake: a bare status line, then close.
    assert.equal((await readToEnd(socket, Buffer.alloc(0))).toString('latin1'), ex.response.raw);
    assertRecorded(route, (await kubelet.waitForRequests(before + 1))[before], ex, sent);
    return;
  }
  const { head, rest } = await readResponseHead(socket);
  assertHeaders(head, ex);
  assertRecorded(route, (await kubelet.waitForRequests(before + 1))[before], ex, sent);

  if (head.status === 101 && headerValue(head, 'upgrade') === 'websocket') {
    await checkWebSocketSession(socket, rest, ex);
  } else if (head.status === 101) {
    await checkSpdySession(socket, rest, ex);
  } else if (headerValue(head, 'transfer-encoding') === 'chunked') {
    await checkFollow(socket, rest, kubelet, ex);
  } else {
    assert.equal((await readBody(socket, head, rest)).toString(), ex.response.bodyPreview);
  }
}

/** Feeds kubectl's recorded frames; the stand-in must send what the recorded one did, in order. */
async function checkWebSocketSession(socket: TLSSocket, rest: Buffer, ex: FixtureExchange): Promise<void> {
  const client = new ChannelWebSocketClient(socket, headerValue({ headers: ex.response.headers }, 'Sec-WebSocket-Protocol') ?? '');
  const got: string[] = [];
  client.on('data', (channel: number, piece: Buffer) => {
    const last = got[got.length - 1];
    const prefix = `${channel.toString(16).padStart(2, '0')}:`;
    if (last?.startsWith(prefix)) got[got.length - 1] = last + piece.toString();
    else got.push(prefix + piece.toString());
  });
  const closed = new Promise<void>((done) => client.once('close', done));
  client.on('closeFrame', (f: { code: number }) => got.push(`close ${f.code}`));
  client.receive(rest);
  socket.resume();
  if (ex.afterUpgradeHex) socket.write(Buffer.from(ex.afterUpgradeHex, 'hex'));
  await closed;
  assert.deepEqual(got, ex.standinSentAfterUpgrade);
}

/** Feeds kubectl's recorded SYN_STREAMs (compressed by Go); each must get a SYN_REPLY. */
async function checkSpdySession(socket: TLSSocket, rest: Buffer, ex: FixtureExchange): Promise<void> {
  const want = (ex.afterUpgradeSpdyFrames ?? []).filter((f) => f.type === 'SYN_STREAM').map((f) => f.streamId);
  assert.ok(want.length > 0 && ex.afterUpgradeHex);
  const parser = new SpdyFrameParser(1024 * 1024);
  const inflater = new HeaderDecompressor();
  const replies = new Map<number, SpdyHeaders>();
  const timer = setTimeout(() => socket.destroy(new Error(`no SYN_REPLY for all of streams ${want.join(', ')} within 5 s`)), 5000);
  try {
    socket.write(Buffer.from(ex.afterUpgradeHex, 'hex'));
    socket.unshift(rest);
    for await (const chunk of socket) {
      for (const frame of parser.push(chunk as Buffer)) {
        if (frame.type === 'SYN_REPLY') replies.set(frame.streamId, await inflater.decompress(frame.headerBlock));
        assert.notEqual(frame.type, 'RST_STREAM', `the stand-in reset a recorded stream: ${JSON.stringify(frame)}`);
      }
      if (want.every((id) => replies.has(id))) break;
    }
  } finally {
    clearTimeout(timer);
    inflater.destroy();
    socket.destroy();
  }
  assert.deepEqual([...replies.keys()].sort(), [...want].sort());
}

/** logs -f: the three lines, then follow lines; when the caller goes, the stream ends within a second. */
async function checkFollow(socket: TLSSocket, rest: Buffer, kubelet: StandinKubelet, ex: FixtureExchange): Promise<void> {
  const decoder = new ChunkedDecoder();
  let text = Buffer.concat(decoder.push(rest)).toString();
  const deadline = performance.now() + 3000;
  socket.resume();
  for await (const chunk of socket) {
    text += Buffer.concat(decoder.push(chunk as Buffer)).toString();
    if (text.includes('follow 2\n') || performance.now() > deadline) break; // breaking destroys the socket
  }
  assert.match(text, /^line 1\nline 2\nline 3\nfollow 1\nfollow 2\n/);
  const leftAt = performance.now();
  socket.destroy();
  const [ended] = await kubelet.waitForFollowEnded(1, 2000);
  assert.equal(ended?.endReason, 'client-gone');
  assert.ok(ended.endedAt! - leftAt < 1000);
  assert.deepEqual(
    ex.standinObserved?.map((o) => o.event),
    ['follow stream ended'],
  );
}

async function replayEntry(t: TestContext, entry: FixtureEntry, start: StartRoute): Promise<void> {
  const h = harness(t);
  const route = await start(h, entry.case.endsWith('-v5-accepted'));
  const { kubelet } = route;
  await replayExchange(h, route, entry);
  // A refused WebSocket is retried over SPDY on a new connection (laterExchanges).
  for (const later of entry.laterExchanges ?? []) await replayExchange(h, route, later);
  assert.equal(kubelet.tlsClientErrors.length, 0);
  assert.equal(kubelet.httpClientErrors.length, 0);
}

async function replayPooled(t: TestContext, entries: FixtureEntry[], start: StartRoute): Promise<void> {
  const h = harness(t);
  const route = await start(h, false);
  const { kubelet } = route;
  const pooled = entries.filter((e) => e.response.status === 200 && e.response.headers.some(([k]) => k === 'Content-Length'));
  assert.ok(pooled.length >= 8, `${pooled.length} pooled cases`);
  const socket = await dialAsApiserver(h, route, pooled[0]!);
  for (const ex of pooled) {
    const sent = send(socket, kubelet, ex);
    const { head, rest } = await readResponseHead(socket);
    assertHeaders(head, ex);
    assert.equal((await readBody(socket, head, rest)).toString(), ex.response.bodyPreview);
    assertRecorded(route, kubelet.requests[kubelet.requests.length - 1], ex, sent);
  }
  assert.equal(kubelet.connectionsAccepted, 1);
  assert.deepEqual(new Set(kubelet.requests.map((r) => r.connection)), new Set([1]));
}

/** Registers one test per recorded entry, plus the pooled-connection test, against routes made by `start`. */
export function defineFixtureReplay(prefix: string, start: StartRoute): void {
  const loaded = kubeAPIServerFixture<FixtureEntry>('kubelet-requests');
  for (const entry of loaded) {
    test(`${prefix}: fixture ${entry.case} is answered as recorded`, LIMIT, (t: TestContext) => replayEntry(t, entry, start));
  }
  test(`${prefix}: node-proxy and log requests share one kept-alive connection, as in kube-apiserver's pool`, LIMIT, (t: TestContext) =>
    replayPooled(t, loaded, start),
  );
}
