// Server ports mapped to an address on a node (the server ConfigMap's
// tcp-proxy-ports), live, against a real kube-apiserver: a raw TCP client
// carries 16 MiB byte-exact through a mapped port to a sink on the node's
// address; the mapping is retargeted and removed without a restart (open
// connections go on; a removed port refuses); a bad entry is skipped with
// one line naming it; a dial that fails resets the client.

import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { connect, createServer, type Socket } from 'node:net';
import { after, before, describe, test } from 'node:test';
import type { TunnelServer } from '../../pkg/server/app.js';
import { controlPlaneSkipReason } from '../support/envtest/index.js';
import { suiteHarness } from '../support/harness.js';
import type { MemoryLogger } from '../support/memory-logger.js';
import { startServerConfigRig, type ServerConfigRig } from '../support/server-config-rig.js';
import { closedPort, readAll, waitFor } from '../support/tunnel.js';
import { freeLowPort } from '../../hack/ports.js';

const skip = controlPlaneSkipReason();

const NODE_IP = '127.0.0.2';

/** A sink on the node's address: answers `<label> <sha256 of what it received>` once the client has finished sending. */
async function startSink(label: string): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
    const hash = createHash('sha256');
    socket.on('data', (chunk: Buffer) => hash.update(chunk));
    socket.on('end', () => socket.end(`${label} ${hash.digest('hex')}`));
    socket.on('error', () => socket.destroy());
  });
  server.listen(0, NODE_IP);
  await once(server, 'listening');
  return {
    port: (server.address() as { port: number }).port,
    close: () => {
      for (const s of sockets) s.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Opens a connection to the mapped port (on the server's loopback). */
async function dialMapped(port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  return socket;
}

/** The error a connection to the mapped port ends with (a reset may come before the connect is reported). */
async function resetCode(port: number): Promise<string | undefined> {
  const socket = connect(port, '127.0.0.1');
  const [err] = (await once(socket, 'error')) as [NodeJS.ErrnoException];
  return err.code;
}

/** Sends `data`, half-closes, and returns what came back. */
async function transfer(socket: Socket, data: Buffer): Promise<string> {
  const answer = readAll(socket);
  socket.end(data);
  return (await answer).toString();
}

const sha256 = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

describe('tcp-proxy-ports, live', { skip }, () => {
  const suite = suiteHarness();
  let server: TunnelServer;
  let log: MemoryLogger;
  let setConfigMap: ServerConfigRig['setConfigMap'];

  before(async () => {
    ({ server, log, setConfigMap } = await startServerConfigRig(suite, NODE_IP));
  });
  after(() => suite.close());

  const listening = (port: number): boolean => server.tcpPorts!.addresses().some((a) => a.port === port);

  test('added, retargeted, removed without a restart; 16 MiB byte-exact; a bad entry named; a failed dial resets', async () => {
    const a = await startSink('A');
    suite.defer(() => a.close());
    const b = await startSink('B');
    suite.defer(() => b.close());
    const port = await freeLowPort();
    const dead = await closedPort();

    // Added, with a bad entry beside it.
    const config = await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/${NODE_IP}:${a.port}, 99999=edge-1/x:1` });
    assert.deepEqual([...config.tcpProxyPorts.keys()], [port]);
    await waitFor('the mapped port to listen', () => listening(port));
    assert.equal(
      log
        .find('server ConfigMap entry skipped')
        .filter((r) => r.fields.problem === `tcp-proxy-ports: "99999=edge-1/x:1": "99999" is not <port> or <listen-ip>:<port>; skipped`).length,
      1,
    );
    const data = randomBytes(16 * 1024 * 1024);
    assert.equal(await transfer(await dialMapped(port), data), `A ${sha256(data)}`);

    // Retargeted: a connection open before goes on to A; new ones go to B.
    const before = await dialMapped(port);
    before.write(data.subarray(0, 1024));
    await waitFor('the first connection to reach A', () => server.tunnel.establishedCount() === 1);
    await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/${NODE_IP}:${b.port}` });
    await waitFor('the retarget to apply', () => log.find('mapped port retargeted; new connections go to the new target').length === 1);
    const small = Buffer.from('to b');
    assert.equal(await transfer(await dialMapped(port), small), `B ${sha256(small)}`);
    assert.equal(await transfer(before, data.subarray(1024, 4096)), `A ${sha256(data.subarray(0, 4096))}`);

    // A target nobody listens on: the client is reset, not ended.
    await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/${NODE_IP}:${dead}` });
    await waitFor('the retarget to the dead port', () => log.find('mapped port retargeted; new connections go to the new target').length === 2);
    assert.equal(await resetCode(port), 'ECONNRESET');

    // A mapping onto itself (the agent runs on this machine) would loop: refused before any dial.
    await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/127.0.0.1:${port}` });
    await waitFor('the retarget onto itself', () => log.find('mapped port retargeted; new connections go to the new target').length === 3);
    assert.equal(await resetCode(port), 'ECONNRESET');
    assert.deepEqual(
      log.find('mapped port could not reach its target; connection reset').map((r) => r.fields.reason),
      ['YT_ERR_DIAL_FAILED', 'YT_ERR_DIAL_LOOP'],
    );

    // Removed: the listener closes, an open connection goes on to its end.
    await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/${NODE_IP}:${a.port}` });
    await waitFor('the retarget back to A', () => log.find('mapped port retargeted; new connections go to the new target').length === 4);
    const open = await dialMapped(port);
    open.write('x');
    await waitFor('the open connection to reach A', () => server.tunnel.establishedCount() === 1);
    await setConfigMap(undefined);
    await waitFor('the mapped port to close', () => !listening(port));
    const closed = connect(port, '127.0.0.1');
    const [closedErr] = (await once(closed, 'error')) as [NodeJS.ErrnoException];
    assert.equal(closedErr.code, 'ECONNREFUSED');
    assert.equal(await transfer(open, Buffer.from('y')), `A ${sha256(Buffer.from('xy'))}`);
    await waitFor('no tunnelled connection left', () => server.tunnel.establishedCount() === 0);
  });

  test('graceful shutdown: the mapped ports stop listening at once, an open connection finishes', async () => {
    const sink = await startSink('S');
    suite.defer(() => sink.close());
    const port = await freeLowPort();
    await setConfigMap({ 'tcp-proxy-ports': `${port}=edge-1/${NODE_IP}:${sink.port}` });
    await waitFor('the mapped port to listen', () => listening(port));
    const open = await dialMapped(port);
    open.write('x');
    await waitFor('the open connection to reach the sink', () => server.tunnel.establishedCount() === 1);
    const shutdown = server.shutdown(10_000);
    await waitFor('the mapped port to close', () => !listening(port));
    const refused = connect(port, '127.0.0.1');
    const [err] = (await once(refused, 'error')) as [NodeJS.ErrnoException];
    assert.equal(err.code, 'ECONNREFUSED');
    assert.equal(await transfer(open, Buffer.from('y')), `S ${sha256(Buffer.from('xy'))}`);
    await shutdown;
  });
});
