// A client's EOF is a half-close: `printf 'CONNECT …\r\n\r\nGET / HTTP/1.0\r\n\r\n' | socat - UNIX-CONNECT:…`,
// `nc -N` and HTTP/1.0 scripts shut their write side once they have sent the
// request, and must still get the answer. Between our server and our agent
// the half-close travels end to end (CLOSE_WRITE); with upstream agents,
// which cannot half-close, the server keeps the connection open for the answer.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { readAll, startAgent, startServer, startTCPServer, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

/** Reads until EOF, leaving the socket open for writing (an async iterator would destroy it). */
function readToEnd(socket: Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (text += c));
    socket.once('end', () => resolve(text));
    socket.once('error', reject);
  });
}

/** Sends the CONNECT head and the request in one write, then half-closes at once, before any answer (as socat does). */
async function halfClosedClient(udsPath: string, target: string, request: string): Promise<string> {
  const socket = connect({ path: udsPath, allowHalfOpen: true });
  await once(socket, 'connect');
  socket.end(`CONNECT ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n${request}`);
  return (await readAll(socket)).toString();
}

for (const halfClose of [true, false]) {
  const who = halfClose ? 'our agent (CLOSE_WRITE end to end)' : 'an agent without half-close (upstream behaviour)';

  test(`a client that half-closes right after its request gets the whole answer, through ${who}`, LIMIT, async (t) => {
    const h = harness(t);
    // An HTTP/1.0-style target: answers once it has read the request head, then closes.
    const target = await startTCPServer(h, (s: Socket) => {
      let got = '';
      s.on('data', (c: Buffer) => {
        got += c.toString();
        if (got.includes('\r\n\r\n')) s.end(`HTTP/1.0 200 OK\r\n\r\nyou asked for ${got.split(' ')[1]}`);
      });
    });
    const server = await startServer(h);
    startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { halfClose } });
    await waitFor('the agent', () => server.tunnel.registry.agentCount === 1);
    assert.equal(server.tunnel.registry.all()[0]!.halfClose, halfClose);
    const answer = await halfClosedClient(server.udsPath, `127.0.0.1:${target.port}`, 'GET /index.html HTTP/1.0\r\n\r\n');
    assert.equal(answer, 'HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.0 200 OK\r\n\r\nyou asked for /index.html');
    await waitFor('tables empty', () => server.tunnel.establishedCount() === 0 && target.sockets.size === 0);
  });
}

test('with half-close the target sees EOF after the last byte, and its answer still comes back', LIMIT, async (t) => {
  const h = harness(t);
  // Counts what it receives until EOF, then answers with the count.
  const target = await startTCPServer(h, (s: Socket) => {
    let n = 0;
    s.on('data', (c: Buffer) => (n += c.length));
    s.on('end', () => s.end(`received ${n} bytes`));
  });
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1' });
  await waitFor('the agent', () => server.tunnel.registry.agentCount === 1);
  const body = 'x'.repeat(300_000);
  const answer = await halfClosedClient(server.udsPath, `127.0.0.1:${target.port}`, body);
  assert.equal(answer, `HTTP/1.1 200 Connection Established\r\n\r\nreceived ${body.length} bytes`);
  await waitFor('tables empty', () => server.tunnel.establishedCount() === 0 && target.sockets.size === 0);
});

test('with half-close a target that ends first still receives what the client sends afterwards', LIMIT, async (t) => {
  const h = harness(t);
  let late = '';
  const targetDone = new Promise<void>((resolve) => {
    void startTCPServer(h, (s: Socket) => {
      s.end('hello, and goodbye');
      s.on('data', (c: Buffer) => (late += c.toString()));
      s.on('end', () => resolve());
    }).then((tgt) => (targetPort = tgt.port));
  });
  let targetPort = 0;
  const server = await startServer(h);
  startAgent(h, server.agentAddress, { nodeName: 'edge-1' });
  await waitFor('the agent and the target', () => server.tunnel.registry.agentCount === 1 && targetPort !== 0);
  const socket = connect({ path: server.udsPath, allowHalfOpen: true });
  await once(socket, 'connect');
  socket.write(`CONNECT 127.0.0.1:${targetPort} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
  const greeting = await readToEnd(socket);
  assert.equal(greeting, 'HTTP/1.1 200 Connection Established\r\n\r\nhello, and goodbye');
  // The target's side is over; ours is not.
  socket.end('a late word');
  await targetDone;
  assert.equal(late, 'a late word');
  await waitFor('tables empty', () => server.tunnel.establishedCount() === 0);
});
