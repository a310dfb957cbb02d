// What the agent says when it cannot reach the tunnel server: the cause, not
// node:http2's wrapping of it ("The pending stream has been canceled").

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { dialServer } from '../../pkg/agent/server-dial.js';
import { silentLogger } from '../../pkg/log/logger.js';
import { testPKI } from '../support/pki.js';

test('a server that is not listening: the dial fails with connect ECONNREFUSED, said plainly', async () => {
  // A port that was just free: listen, note it, close.
  const probe = createServer().listen(0, '127.0.0.1');
  await once(probe, 'listening');
  const { port } = probe.address() as AddressInfo;
  probe.close();
  await once(probe, 'close');
  const pki = testPKI();
  const edge = pki.agent('edge-1', 'host=edge-1');
  await assert.rejects(
    dialServer(
      {
        address: `127.0.0.1:${port}`,
        verifyName: '127.0.0.1',
        tls: { ca: pki.ca.cert, cert: edge.cert, key: edge.key },
        agentID: 'edge-1',
        identifiers: 'host=edge-1',
        receiveWindow: 1 << 20,
        connWindow: 1 << 20,
        halfClose: true,
        handshakeTimeoutMs: 10_000,
        resume: undefined,
      },
      silentLogger(),
    ),
    (err: Error) => {
      assert.match(err.message, new RegExp(`^tunnel server 127\\.0\\.0\\.1:${port}: connect ECONNREFUSED 127\\.0\\.0\\.1:${port}$`));
      return true;
    },
  );
});
