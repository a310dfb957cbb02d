// Which addresses reach the server's own listeners, for an agent on this
// machine and for one elsewhere; the mark master ports put on what they
// forward; the reason a looping dial is refused with.

import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import { test } from 'node:test';
import { LoopGuard } from '../../pkg/frontend/loop-guard.js';
import { markedByTunnel, withLoopMark } from '../../pkg/interceptor/loop-mark.js';
import { Registry } from '../../pkg/metrics/prom.js';
import { isThisMachine, OwnListeners } from '../../pkg/net/own-listeners.js';

const P = 20263;
const here = (): boolean => true;
const elsewhere = (): boolean => false;

function listeningOn(address: string, family: 'IPv4' | 'IPv6' = address.includes(':') ? 'IPv6' : 'IPv4'): OwnListeners {
  const own = new OwnListeners();
  own.add('secure master port', () => ({ address, family, port: P }));
  return own;
}

/** An address of one of this machine's interfaces that is not loopback, if it has one. */
function interfaceAddress(family: 'IPv4' | 'IPv6'): string | undefined {
  return Object.values(networkInterfaces())
    .flatMap((l) => l ?? [])
    .find((a) => !a.internal && a.family === family && !a.address.startsWith('fe80'))?.address;
}

test('a listener on 127.0.0.1 is reached by its address and by localhost names, only from this machine', () => {
  const own = listeningOn('127.0.0.1');
  assert.deepEqual(own.reached('127.0.0.1', P, here), { name: 'secure master port', address: `127.0.0.1:${P}` });
  for (const host of ['localhost', 'LOCALHOST', 'edge.localhost', '::ffff:127.0.0.1', '0.0.0.0']) {
    assert.equal(own.reached(host, P, here)?.name, 'secure master port', host);
  }
  // An agent elsewhere reaches its own loopback, not ours.
  assert.equal(own.reached('127.0.0.1', P, elsewhere), undefined);
  assert.equal(own.reached('localhost', P, elsewhere), undefined);
  // Another loopback address, another port, another family: not the listener.
  assert.equal(own.reached('127.0.0.2', P, here), undefined);
  assert.equal(own.reached('127.0.0.1', P + 1, here), undefined);
  assert.equal(own.reached('::1', P, here), undefined);
});

test('a listener on 0.0.0.0 is reached by every IPv4 address of this machine; its interface addresses from anywhere', () => {
  const own = listeningOn('0.0.0.0');
  assert.equal(own.reached('127.0.0.1', P, here)?.address, `0.0.0.0:${P}`);
  assert.equal(own.reached('127.0.0.1', P, elsewhere), undefined);
  assert.equal(own.reached(hostname(), P, elsewhere)?.name, 'secure master port');
  assert.equal(own.reached('::1', P, here), undefined, 'IPv4 only');
  assert.equal(own.reached('203.0.113.7', P, here), undefined, 'not an address of this machine');
  const ip = interfaceAddress('IPv4');
  if (ip !== undefined) assert.equal(own.reached(ip, P, elsewhere)?.name, 'secure master port', ip);
});

test('a listener on :: is reached by both families', () => {
  const own = listeningOn('::');
  assert.equal(own.reached('::1', P, here)?.address, `[::]:${P}`);
  assert.equal(own.reached('[::1]', P, here)?.name, 'secure master port');
  assert.equal(own.reached('127.0.0.1', P, here)?.name, 'secure master port');
  assert.equal(own.reached('::1', P, elsewhere), undefined);
});

test('a listener on one interface address is reached by that address from anywhere', () => {
  const own = listeningOn('203.0.113.7');
  assert.equal(own.reached('203.0.113.7', P, elsewhere)?.address, `203.0.113.7:${P}`);
  assert.equal(own.reached('127.0.0.1', P, here), undefined);
});

test('where the agent runs is asked only when a dial names a port of ours; a listener not yet listening is none', () => {
  const own = new OwnListeners();
  let bound: AddressInfo | null = null;
  own.add('meta port', () => bound);
  const never = (): boolean => assert.fail('asked where the agent runs');
  assert.equal(own.reached('127.0.0.1', P, never), undefined);
  bound = { address: '127.0.0.1', family: 'IPv4', port: P };
  assert.equal(own.reached('10.0.0.1', P + 1, never), undefined);
  assert.equal(own.reached('127.0.0.1', P, here)?.name, 'meta port');
});

test('this machine: loopback and its interface addresses', () => {
  assert.equal(isThisMachine('127.0.0.1'), true);
  assert.equal(isThisMachine('::1'), true);
  assert.equal(isThisMachine('::ffff:127.0.0.1'), true);
  assert.equal(isThisMachine('203.0.113.7'), false);
  const ip = interfaceAddress('IPv4');
  if (ip !== undefined) assert.equal(isThisMachine(ip), true);
});

test('the Via mark: added to what is forwarded, found among other proxies', () => {
  assert.deepEqual(withLoopMark(['Host', 'edge-1:10250']), ['Host', 'edge-1:10250', 'Via', '1.1 yurt-tunnel-server']);
  assert.equal(markedByTunnel(undefined), false);
  assert.equal(markedByTunnel('1.1 yurt-tunnel-server'), true);
  assert.equal(markedByTunnel('1.0 fred, 1.1 Yurt-Tunnel-Server (a comment)'), true);
  assert.equal(markedByTunnel('1.1 proxy.example.com'), false);
  assert.equal(markedByTunnel('1.1 yurt-tunnel-server-2'), false);
  assert.equal(markedByTunnel(''), false);
});

test('a dial to an own listener: the reason names the listener and what to do, and it is counted', async () => {
  const registry = new Registry();
  const guard = new LoopGuard(listeningOn('127.0.0.1'), registry);
  assert.equal(
    guard.dialRefusal(`127.0.0.1:${P}`, { agentID: 'edge-1', remoteAddress: '127.0.0.1:51000' }),
    `dial to 127.0.0.1:${P} refused: it is this tunnel server's own secure master port (listening on 127.0.0.1:${P}), and agent edge-1 ` +
      'runs on this machine: the connection it would open comes back into the tunnel and loops; address the node itself ' +
      '(its name, or its IP and kubelet port), not the tunnel server',
  );
  // The edge node's own loopback port of the same number is not ours.
  assert.equal(guard.dialRefusal(`127.0.0.1:${P}`, { agentID: 'edge-2', remoteAddress: '203.0.113.9:40000' }), undefined);
  assert.equal(guard.dialRefusal('127.0.0.1:10250', { agentID: 'edge-1', remoteAddress: '127.0.0.1:51000' }), undefined);
  assert.match(await registry.metrics(), /^yurttunnel_server_loops_refused_total\{check="own_listener"\} 1$/m);
});
