// splice(): how one side of a joined pair ends is how the other side ends. A
// clean end (EOF) stays an end; a failure (a reset, an error, a close without
// EOF) becomes an abortive close: a TCP socket is reset, a tunnelled
// connection passes the error on in its final packet. Real loopback sockets.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { splice } from '../../pkg/mux/splice.js';
import { emptyIdentifiers } from '../../pkg/protocol/identifiers.js';
import { Backend } from '../../pkg/tunnel/backend.js';
import { TunnelConn } from '../../pkg/tunnel/tunnel-conn.js';
import { harness, type Harness } from '../support/harness.js';
import { RecordingLink } from '../support/recording-link.js';

const LIMIT = { timeout: 10_000 };

/** A connected loopback TCP pair: [the dialling end, the accepted end]. */
async function tcpPair(h: Harness): Promise<[Socket, Socket]> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const accepted = once(server, 'connection') as Promise<[Socket]>;
  const client = connect((server.address() as AddressInfo).port, '127.0.0.1');
  const [[peer]] = await Promise.all([accepted, once(client, 'connect')]);
  server.close();
  h.defer(() => {
    client.destroy();
    peer.destroy();
  });
  return [client, peer];
}

interface Reader {
  /** How the stream ended, as its reader sees it: 'end' (EOF) or the error's code. */
  ended: Promise<string>;
  /** Resolves once the first bytes arrived. */
  firstBytes: Promise<void>;
  text(): string;
}

/** Reads `socket` to its end. */
function read(socket: Socket): Reader {
  let text = '';
  const firstBytes = once(socket, 'data').then(() => undefined);
  socket.on('data', (c: Buffer) => (text += c.toString()));
  const ended = new Promise<string>((resolve) => {
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    socket.once('end', () => resolve('end'));
  });
  return { ended, firstBytes, text: () => text };
}

/**
 * caller ⇄ [a ⋈ b] ⇄ target: two TCP connections joined by splice, as a
 * relay between a caller and a target.
 */
async function relay(h: Harness): Promise<{ caller: Socket; target: Socket }> {
  const [caller, a] = await tcpPair(h);
  const [b, target] = await tcpPair(h);
  splice(a, b);
  return { caller, target };
}

test('a reset on one side of a spliced pair reaches the other side as a reset', LIMIT, async (t) => {
  const h = harness(t);
  const { caller, target } = await relay(h);
  const callerSees = read(caller);
  target.write('partial');
  await callerSees.firstBytes;
  target.resetAndDestroy();
  assert.equal(await callerSees.ended, 'ECONNRESET');
});

test('a side closed without its end (destroyed locally) is a failure: the other side is reset', LIMIT, async (t) => {
  const h = harness(t);
  const [caller, a] = await tcpPair(h);
  const [b, target] = await tcpPair(h);
  splice(a, b);
  const callerSees = read(caller);
  target.write('partial');
  await callerSees.firstBytes;
  b.destroy();
  assert.equal(await callerSees.ended, 'ECONNRESET');
});

test('a clean end on one side is a clean end on the other, after the last bytes', LIMIT, async (t) => {
  const h = harness(t);
  const { caller, target } = await relay(h);
  const callerSees = read(caller);
  target.end('the whole answer');
  assert.equal(await callerSees.ended, 'end');
  assert.equal(callerSees.text(), 'the whole answer');
});

/** Records the packets a connection sends; the tunnel may close it. */
class ClosableLink extends RecordingLink {
  constructor() {
    super({ mayClose: true });
  }
}

test('a socket spliced with a tunnelled connection: its reset goes out as CLOSE_REQ with the error, and a failed connection resets it', LIMIT, async (t) => {
  const h = harness(t);
  const link = new ClosableLink();
  const backend = new Backend({ agentID: 'edge-1', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:1', certSubject: 'CN=x', halfClose: true }, link);

  // The caller resets: the agent is told it was a failure.
  const [caller, a] = await tcpPair(h);
  const conn = new TunnelConn(backend, 1n, '127.0.0.1:80');
  splice(a, conn);
  const closed = new Promise((resolve) => conn.once('close', resolve));
  caller.resetAndDestroy();
  await closed;
  assert.deepEqual(link.control, [{ type: 'CLOSE_REQ', connectID: 1n, error: 'read ECONNRESET' }]);

  // The agent reports a failure (CLOSE_RSP with an error): the caller is reset.
  const [caller2, a2] = await tcpPair(h);
  const conn2 = new TunnelConn(backend, 2n, '127.0.0.1:80');
  splice(a2, conn2);
  const caller2Sees = read(caller2);
  conn2.deliver(Buffer.from('partial'));
  await caller2Sees.firstBytes;
  conn2.remoteClose(new Error('agent edge-1 ended the connection with an error: read ECONNRESET'));
  assert.equal(await caller2Sees.ended, 'ECONNRESET');
  assert.equal(caller2Sees.text(), 'partial');
});

/** A link whose transport is gone (session resume) until resume(): DATA callbacks wait meanwhile. */
class SuspendableLink extends ClosableLink {
  suspended = true;
  private held: Array<() => void> = [];
  override sendData(_connectID: bigint, _data: Buffer, cb: (err?: Error | null) => void): void {
    if (this.suspended) this.held.push(() => cb());
    else cb();
  }
  resume(): void {
    this.suspended = false;
    for (const cb of this.held.splice(0)) cb();
  }
}

test('the last bytes of a connection whose link is suspended are flushed once it resumes, however long past the flush timeout', LIMIT, async (t) => {
  const h = harness(t);
  const link = new SuspendableLink();
  const backend = new Backend({ agentID: 'edge-1', identifiers: emptyIdentifiers(), remoteAddress: '127.0.0.1:1', certSubject: 'CN=x', halfClose: true }, link);
  const [caller, a] = await tcpPair(h);
  const conn = new TunnelConn(backend, 1n, '127.0.0.1:80', { halfClose: true });
  const flushTimeoutMs = 50;
  const ended = new Promise<Error | undefined>((resolve) => splice(a, conn, resolve, { flushTimeoutMs }));
  caller.resume();
  // The agent's side has finished (CLOSE_WRITE), and the caller ends: its socket closes,
  // and the connection's last bytes wait for the link.
  conn.remoteEndWrite();
  caller.end('the tail');
  await waitForClose(a);
  // A blip ten times the flush timeout: the connection is still there, waiting.
  await new Promise((r) => setTimeout(r, 10 * flushTimeoutMs));
  assert.equal(conn.destroyed, false, 'the connection waited for its link');
  link.resume();
  assert.equal(await ended, undefined);
  assert.ok(
    link.control.every((p) => p.type !== 'CLOSE_REQ' || p.error === undefined || p.error === ''),
    `a clean close, not an abort: ${JSON.stringify(link.control, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v))}`,
  );
});

function waitForClose(s: Socket): Promise<void> {
  return s.destroyed ? Promise.resolve() : new Promise((r) => s.once('close', () => r()));
}
