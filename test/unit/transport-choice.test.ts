// `--transport auto` when the path breaks while dialing: a reset is the path
// breaking, not HTTP/2 refused, so the agent does not move to the WebSocket
// for it (it would stay there for the life of the process).

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { test } from 'node:test';
import { dialServerLink, forgetTransports } from '../../pkg/agent/transport-choice.js';
import { silentLogger } from '../../pkg/log/logger.js';
import { harness } from '../support/harness.js';
import { testPKI } from '../support/pki.js';

test('auto: a reset while dialing gRPC is retried later over gRPC, not taken for HTTP/2 refused', async (t) => {
  const h = harness(t);
  forgetTransports();
  let accepted = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    accepted++;
    sockets.add(socket);
    socket.once('data', () => socket.resetAndDestroy());
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h.defer(async () => {
    for (const s of sockets) s.destroy();
    server.close();
    await once(server, 'close');
  });
  const pki = testPKI();
  const edge = pki.agent('edge-1', 'host=edge-1');
  const target = {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    verifyName: '127.0.0.1',
    tls: { ca: pki.ca.cert, cert: edge.cert, key: edge.key },
    agentID: 'edge-1',
    identifiers: 'host=edge-1',
    receiveWindow: 1 << 20,
    connWindow: 1 << 20,
    halfClose: true,
    handshakeTimeoutMs: 5_000,
    resume: undefined,
    transport: 'auto' as const,
  };
  await assert.rejects(dialServerLink(target, silentLogger()), /ECONNRESET/);
  assert.equal(accepted, 1, 'one dial, over gRPC only');
});
