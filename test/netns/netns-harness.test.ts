// The network-namespace harness (test/support/netns): namespaces linked by a
// veth pair, listeners and probes inside them, a port carried from one
// namespace to another, and nothing left behind, in them or in the root namespace.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { harness } from '../support/harness.js';
import { exposePort, NetworkNamespace, netnsSkipReason, probeTCP, run, startBanners, vethPair } from '../support/netns/index.js';

const skip = netnsSkipReason();

async function rootLinks(): Promise<string> {
  return (await run('ip', ['-o', 'link', 'show'])).stdout.replace(/\s+link\/.*$/gm, '');
}

async function namespaces(): Promise<string[]> {
  return (await run('ip', ['netns', 'list'])).stdout
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n !== '');
}

test('two namespaces over a veth pair: listeners, probes, an exposed port; cleanup deletes both and the root namespace is as before', { skip }, async (t) => {
  const linksBefore = await rootLinks();
  let names: string[] = [];
  await t.test('inside', async (t) => {
    const h = harness(t);
    const a = await NetworkNamespace.create(h, 'yt-a');
    const b = await NetworkNamespace.create(h, 'yt-b');
    names = [a.name, b.name];
    assert.match(a.name, /^yt-a-[0-9a-f]{8}$/);
    assert.notEqual(a.name, b.name);
    await vethPair({ ns: a, name: 'to-b', addresses: ['10.200.0.1/30'] }, { ns: b, name: 'to-a', addresses: ['10.200.0.2/30'] });
    await b.addAddress('lo', '10.201.0.1/32');
    await startBanners(h, b, [
      { host: '10.200.0.2', port: 7001, banner: 'b on the veth' },
      { host: '10.201.0.1', port: 7001, banner: 'b on its loopback' },
    ]);
    assert.deepEqual(await probeTCP(a, '10.200.0.2', 7001), { ok: true, data: 'b on the veth' });
    // a has no route to b's loopback address: the namespaces see only what they were given.
    assert.deepEqual(await probeTCP(a, '10.201.0.1', 7001), { ok: false, code: 'ENETUNREACH' });
    await a.ip('route', 'add', '10.201.0.0/24', 'via', '10.200.0.2');
    assert.deepEqual(await probeTCP(a, '10.201.0.1', 7001), { ok: true, data: 'b on its loopback' });
    assert.deepEqual(await probeTCP(a, '10.200.0.2', 7002), { ok: false, code: 'ECONNREFUSED' });

    // A port on the root namespace's loopback, reachable at the same address inside a.
    const server = createServer((s) => s.end('root loopback'));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    h.defer(() => new Promise((r) => server.close(r)));
    const port = (server.address() as { port: number }).port;
    assert.deepEqual(await probeTCP(a, '127.0.0.1', port), { ok: false, code: 'ECONNREFUSED' });
    await exposePort(h, { to: a, port });
    assert.deepEqual(await probeTCP(a, '127.0.0.1', port), { ok: true, data: 'root loopback' });

    assert.ok((await namespaces()).includes(a.name));
    assert.match(await a.must('ip', ['-o', 'addr', 'show', 'dev', 'to-b']), /10\.200\.0\.1\/30/);
  });
  const left = await namespaces();
  for (const name of names) assert.ok(!left.includes(name), `${name} deleted`);
  assert.equal(await rootLinks(), linksBefore, 'the root namespace has the same links');
});
