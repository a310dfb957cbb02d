// The proxier's boundary: an error while serving one CONNECT client (here a
// tunnel connection that throws when joined to its socket) closes that client and is
// logged with its stack, and the tunnel connection is closed too; it is never
// an unhandled rejection, and the proxier keeps serving.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { HttpConnectServer } from '../../pkg/frontend/http-connect.js';
import type { Tunnel } from '../../pkg/tunnel/tunnel.js';
import { harness } from '../support/harness.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { tempDir, waitFor } from '../support/tunnel.js';

test('an error thrown while serving one client closes only that client, logged with its stack', async (t) => {
  const h = harness(t);
  const log = new MemoryLogger();
  let dials = 0;
  const destroyed: Error[] = [];
  const faulty = {
    dial: () => {
      dials++;
      const relay = {
        attach: () => {
          throw new Error('boom in the tunnel connection');
        },
        destroy: (err: Error) => void destroyed.push(err),
      };
      return new Promise((resolve) => setImmediate(() => resolve(relay)));
    },
  } as unknown as Tunnel;
  const path = join(await tempDir(h), 'p.sock');
  const proxier = new HttpConnectServer(faulty, { path, logger: log });
  await proxier.start();
  h.defer(() => proxier.close());
  const rejections: unknown[] = [];
  const onRejection = (err: unknown): void => void rejections.push(err);
  process.on('unhandledRejection', onRejection);
  h.defer(() => process.off('unhandledRejection', onRejection));
  for (let i = 0; i < 2; i++) {
    const s = connect(path);
    s.on('error', () => {});
    await once(s, 'connect');
    s.write('CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: x\r\n\r\nearly bytes');
    s.resume();
    await once(s, 'close');
  }
  assert.equal(dials, 2, 'the proxier served the second client too');
  await waitFor('both logged', () => log.find('internal error serving a CONNECT client').length === 2);
  assert.match(String(log.find('internal error serving a CONNECT client')[0]!.fields.stack), /boom in the tunnel connection/);
  assert.deepEqual(rejections, []);
  // The tunnel connection does not outlive its client.
  assert.deepEqual(
    destroyed.map((e) => e.message),
    ['boom in the tunnel connection', 'boom in the tunnel connection'],
  );
});
