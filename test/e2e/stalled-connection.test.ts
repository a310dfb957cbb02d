// Without per-connection flow control (upstream Go agents), one connection
// whose reader stops makes the server pause the agent's whole stream, as
// Konnectivity does: every other connection and every new dial of that agent
// waits. We bound it: past --stalled-connection-timeout that one connection is
// closed (YT_ERR_CONN_STALLED) and the rest flows again.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { connectVia, readExactly, startAgent, startEchoServer, startServer, startFirehose, waitFor } from '../support/tunnel.js';

const LIMIT = { timeout: 60_000 };

test('a stalled reader behind an agent without flow control is closed after the limit; new dials and other connections flow', LIMIT, async (t) => {
  const h = harness(t);
  const firehose = await startFirehose(h);
  const echo = await startEchoServer(h);
  const server = await startServer(h, { tunnel: { stalledConnectionTimeoutMs: 500, dialTimeoutMs: 5000 } });
  // connWindow 0: the agent announces no flow control, as an upstream agent.
  startAgent(h, server.agentAddress, { nodeName: 'edge-1', connection: { connWindow: 0 } });
  await waitFor('the agent', () => server.tunnel.registry.agentCount === 1);
  assert.equal(server.tunnel.registry.all()[0]!.flow, undefined);

  // A reader that takes nothing: its buffer fills and the agent's stream pauses for it.
  const stalled = await connectVia(server.udsPath, `127.0.0.1:${firehose.port}`);
  assert.equal(stalled.status, 200);
  stalled.socket.pause();
  const closed = new Promise<void>((resolve) => stalled.socket.once('close', () => resolve()));

  // A new dial meanwhile still gets through once the stalled connection is dropped.
  const other = await connectVia(server.udsPath, `127.0.0.1:${echo.port}`);
  assert.equal(other.status, 200, other.head);
  other.socket.write('still flowing');
  assert.equal((await readExactly(other.socket, 13, other.rest)).toString(), 'still flowing');
  other.socket.destroy();
  await waitFor('the stalled connection closed', () => server.log.find('closed a stalled connection').length === 1);
  // The client, reading again, finds its connection ended.
  stalled.socket.resume();
  await closed;
  const logged = server.log.find('closed a stalled connection');
  assert.equal(logged.length, 1);
  assert.equal(logged[0]!.fields.reason, 'YT_ERR_CONN_STALLED');
  assert.equal(logged[0]!.fields.agentID, 'edge-1');
  await waitFor('tables empty', () => server.tunnel.establishedCount() === 0);
});
