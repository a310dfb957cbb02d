// A caller that resets its connection in the middle of the TLS handshake on
// the agent port is named in the log line: its TLS socket no longer knows its
// remoteAddress by then, so the endpoint carries the peer from the raw
// connection to 'tlsClientError' (pkg/endpoint/agent-endpoint.ts).

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { startServer, waitFor } from '../support/tunnel.js';

const FAILED = 'agent TLS handshake failed; connection refused';

test('a reset mid-handshake on the agent port is logged with the peer that reset', async (t) => {
  const h = harness(t);
  const server = await startServer(h);
  const port = Number(server.agentAddress.split(':')[1]);
  // Two callers at once, so that a peer taken from the wrong connection would show.
  const idle = connect(port, '127.0.0.1');
  h.defer(() => idle.destroy());
  await once(idle, 'connect');
  const caller = connect(port, '127.0.0.1');
  await once(caller, 'connect');
  const peer = `127.0.0.1:${caller.localPort}`;
  // The start of a ClientHello record, then a reset (RST, not FIN).
  caller.write(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x50, 0x01]));
  await new Promise((r) => setTimeout(r, 50));
  caller.resetAndDestroy();
  await waitFor('the server to log the failed handshake', () => server.log.find(FAILED).length >= 1);
  const [line] = server.log.find(FAILED);
  assert.equal(line!.fields.remoteAddress, peer);
  assert.match(String(line!.fields.error), /ECONNRESET/);
});
