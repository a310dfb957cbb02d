// Who a dial goes to: the registry of agent streams and its proxy strategies.
// Backends are real `Backend` objects on a link that must never be used (the
// registry only indexes; it never sends).

import assert from 'node:assert/strict';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { test, type TestContext } from 'node:test';
import { setImmediate, setTimeout } from 'node:timers/promises';
import type { AgentLink } from '../../pkg/tunnel/agent-link.js';
import { Backend } from '../../pkg/tunnel/backend.js';
import { BackendRegistry, PROXY_STRATEGIES, parseProxyStrategies } from '../../pkg/tunnel/backend-registry.js';
import { emptyIdentifiers, parseAgentIdentifiers } from '../../pkg/protocol/identifiers.js';
import { exposedGc } from '../support/gc.js';

const LIMIT = { timeout: 10_000 };

/** A link that fails the test if the registry ever uses it. */
const SILENT_LINK: AgentLink = {
  sendData: () => assert.fail('the registry sent DATA'),
  sendControl: () => assert.fail('the registry sent a control packet'),
  pauseReceive: () => assert.fail('the registry paused a link'),
  resumeReceive: () => assert.fail('the registry resumed a link'),
  close: () => assert.fail('the registry closed a link'),
};

/** A backend for `agentID` advertising `identifiers` (URL-query syntax). */
function backend(agentID: string, identifiers = '', opts: { draining?: boolean } = {}): Backend {
  const b = new Backend(
    { agentID, identifiers: parseAgentIdentifiers(identifiers), remoteAddress: '127.0.0.1:40000', certSubject: `CN=${agentID}` },
    SILENT_LINK,
  );
  b.draining = opts.draining ?? false;
  return b;
}

function registryWith(...backends: Backend[]): BackendRegistry {
  const r = new BackendRegistry();
  for (const b of backends) r.add(b);
  return r;
}

/**
 * Replaces Math.random for this test; the returned function makes the random
 * agent choice start at index `i` of `n` agents (in insertion order).
 */
function steerRandom(t: TestContext): (i: number, n: number) => void {
  let value = 0;
  t.mock.method(Math, 'random', () => value);
  return (i, n) => {
    value = (i + 0.5) / n;
  };
}

test('destHost matches host names and IPv6 addresses without case, as DNS does; IPv4 as written', LIMIT, () => {
  const edge = backend('edge-1', 'host=edge-1&ipv6=fe80::1&ipv4=10.0.0.1');
  const r = registryWith(edge);
  for (const host of ['edge-1', 'EDGE-1', 'Edge-1', 'fe80::1', 'FE80::1', '10.0.0.1']) assert.equal(r.pick(['destHost'], host), edge, host);
  assert.equal(r.pick(['destHost'], 'edge-2'), undefined);
  const upper = backend('edge-2', 'host=EDGE-2');
  r.add(upper);
  assert.equal(r.pick(['destHost'], 'edge-2'), upper, 'an advertised name in capitals is found too');
  assert.equal(r.remove(upper), true);
  assert.equal(r.pick(['destHost'], 'edge-2'), undefined, 'and removed under the same key');
});

test('parseProxyStrategies reads a comma list in order, trimming blanks', LIMIT, () => {
  assert.deepEqual(parseProxyStrategies('destHost'), ['destHost']);
  assert.deepEqual(parseProxyStrategies('destHost,default'), ['destHost', 'default']);
  assert.deepEqual(parseProxyStrategies(' defaultRoute , destHost ,'), ['defaultRoute', 'destHost']);
  assert.deepEqual(parseProxyStrategies(PROXY_STRATEGIES.join(',')), ['destHost', 'default', 'defaultRoute']);
});

test('parseProxyStrategies drops duplicates, keeping the first position', LIMIT, () => {
  assert.deepEqual(parseProxyStrategies('default,destHost,default,destHost'), ['default', 'destHost']);
});

test('parseProxyStrategies refuses an unknown name, naming it', LIMIT, () => {
  for (const name of ['nearest', 'desthost', 'DestHost', 'default-route']) {
    assert.throws(() => parseProxyStrategies(`destHost,${name}`), {
      name: 'TypeError',
      message: `unknown proxy strategy ${JSON.stringify(name)}; use a comma list of: destHost, default, defaultRoute`,
    });
  }
});

test('parseProxyStrategies refuses an empty list', LIMIT, () => {
  for (const text of ['', ',', ' , ']) {
    assert.throws(() => parseProxyStrategies(text), {
      name: 'TypeError',
      message: '--proxy-strategy needs at least one of: destHost, default, defaultRoute',
    });
  }
});

test('destHost finds the agent advertising the host as ipv4, ipv6 or host name', LIMIT, () => {
  const a = backend('node-a', 'ipv4=10.0.0.5&host=node-a');
  const b = backend('node-b', 'ipv6=fd00::6&host=node-b');
  const r = registryWith(a, b);
  assert.equal(r.pick(['destHost'], '10.0.0.5'), a);
  assert.equal(r.pick(['destHost'], 'node-a'), a);
  assert.equal(r.pick(['destHost'], 'fd00::6'), b);
  assert.equal(r.pick(['destHost'], 'node-b'), b);
  assert.equal(r.pick(['destHost'], '10.0.0.6'), undefined);
  assert.equal(r.pick(['destHost'], 'node-c'), undefined);
  assert.equal(r.pick(['destHost'], ''), undefined);
});

test('destHost does not match cidr identifiers or the agent ID itself', LIMIT, () => {
  const r = registryWith(backend('node-a', 'cidr=10.0.0.0/24'));
  assert.equal(r.pick(['destHost'], '10.0.0.5'), undefined);
  assert.equal(r.pick(['destHost'], '10.0.0.0/24'), undefined);
  assert.equal(r.pick(['destHost'], 'node-a'), undefined);
});

test('strategies are tried in order: destHost first, default only when no agent advertises the host', LIMIT, (t) => {
  const randomStartsAt = steerRandom(t);
  const a = backend('node-a', 'host=node-a');
  const b = backend('node-b', 'host=node-b');
  const r = registryWith(a, b);
  for (let i = 0; i < 2; i++) {
    randomStartsAt(i, 2);
    assert.equal(r.pick(['destHost', 'default'], 'node-b'), b);
    assert.equal(r.pick(['destHost', 'default'], 'node-a'), a);
    assert.equal(r.pick(['destHost', 'default'], 'elsewhere'), [a, b][i]);
    // With default first, destHost is never consulted.
    assert.equal(r.pick(['default', 'destHost'], 'node-b'), [a, b][i]);
  }
});

test('default picks any agent; nothing when no agent is connected', LIMIT, () => {
  const r = new BackendRegistry();
  for (const s of PROXY_STRATEGIES) assert.equal(r.pick([s], 'anything'), undefined);
  assert.equal(r.pick(PROXY_STRATEGIES, 'anything'), undefined);
  const a = backend('node-a');
  r.add(a);
  assert.equal(r.pick(['default'], 'anything'), a);
});

test('defaultRoute picks only agents that advertise default-route=true', LIMIT, (t) => {
  const randomStartsAt = steerRandom(t);
  const plain = backend('node-a', 'host=node-a');
  const router = backend('node-b', 'host=node-b&default-route=true');
  const refuses = backend('node-c', 'default-route=false');
  const r = registryWith(plain, router, refuses);
  for (let i = 0; i < 3; i++) {
    randomStartsAt(i, 3);
    assert.equal(r.pick(['defaultRoute'], '10.9.9.9'), router);
    assert.equal(r.pick(['defaultRoute'], 'node-a'), router);
  }
  assert.equal(registryWith(plain, refuses).pick(['defaultRoute'], '10.9.9.9'), undefined);
});

test('of several streams from one agent, the oldest serves every strategy', LIMIT, () => {
  const first = backend('node-a', 'ipv4=10.0.0.5&default-route=true');
  const second = backend('node-a', 'ipv4=10.0.0.5&default-route=true');
  const r = registryWith(first, second);
  assert.equal(r.agentCount, 1);
  assert.deepEqual(r.streamsOf('node-a'), [first, second]);
  for (const s of PROXY_STRATEGIES) assert.equal(r.pick([s], '10.0.0.5'), first, s);
  assert.equal(r.remove(first), true);
  for (const s of PROXY_STRATEGIES) assert.equal(r.pick([s], '10.0.0.5'), second, s);
});

test('destHost uses a draining stream only when no other stream advertises the host', LIMIT, () => {
  const old = backend('node-a', 'host=shared', { draining: true });
  const fresh = backend('node-b', 'host=shared');
  const r = registryWith(old, fresh);
  assert.equal(r.pick(['destHost'], 'shared'), fresh);
  r.remove(fresh);
  assert.equal(r.pick(['destHost'], 'shared'), old);
});

test('a draining oldest stream of an agent gives way to its newer stream', LIMIT, () => {
  const first = backend('node-a', 'host=node-a&default-route=true', { draining: true });
  const second = backend('node-a', 'host=node-a&default-route=true');
  const r = registryWith(first, second);
  for (const s of PROXY_STRATEGIES) assert.equal(r.pick([s], 'node-a'), second, s);
});

test('default and defaultRoute skip a draining agent whichever agent the random choice starts at', LIMIT, (t) => {
  const randomStartsAt = steerRandom(t);
  const draining = backend('node-a', 'default-route=true', { draining: true });
  const active = backend('node-b', 'default-route=true');
  const r = registryWith(draining, active);
  for (let i = 0; i < 2; i++) {
    randomStartsAt(i, 2);
    assert.equal(r.pick(['default'], 'x'), active, `default, start ${i}`);
    assert.equal(r.pick(['defaultRoute'], 'x'), active, `defaultRoute, start ${i}`);
  }
});

test('when every agent is draining, one of them is still picked (last resort)', LIMIT, (t) => {
  const randomStartsAt = steerRandom(t);
  const a = backend('node-a', 'host=h&default-route=true', { draining: true });
  const b = backend('node-b', 'host=h&default-route=true', { draining: true });
  const r = registryWith(a, b);
  for (let i = 0; i < 2; i++) {
    randomStartsAt(i, 2);
    assert.equal(r.pick(['default'], 'x'), [a, b][i]);
    assert.equal(r.pick(['defaultRoute'], 'x'), [a, b][i]);
  }
  assert.equal(r.pick(['destHost'], 'h'), a);
});

test('remove() takes a backend out of every index and returns false the second time', LIMIT, () => {
  const a = backend('node-a', 'ipv4=10.0.0.5&ipv6=fd00::5&host=node-a&default-route=true');
  const r = registryWith(a);
  for (const s of PROXY_STRATEGIES) assert.equal(r.readyFor(s), true, s);
  assert.equal(r.remove(a), true);
  for (const host of ['10.0.0.5', 'fd00::5', 'node-a']) {
    for (const s of PROXY_STRATEGIES) assert.equal(r.pick([s], host), undefined, `${s} ${host}`);
  }
  for (const s of PROXY_STRATEGIES) assert.equal(r.readyFor(s), false, s);
  assert.equal(r.agentCount, 0);
  assert.deepEqual(r.all(), []);
  assert.deepEqual(r.streamsOf('node-a'), []);
  assert.equal(r.remove(a), false);
});

test("remove() of one stream leaves the agent's other streams and other agents indexed", LIMIT, () => {
  const a1 = backend('node-a', 'host=shared&host=node-a&default-route=true');
  const a2 = backend('node-a', 'host=shared&host=node-a&default-route=true');
  const b = backend('node-b', 'host=shared');
  const r = registryWith(a1, a2, b);
  r.remove(a1);
  assert.equal(r.pick(['destHost'], 'node-a'), a2);
  assert.equal(r.pick(['destHost'], 'shared'), a2);
  assert.equal(r.pick(['defaultRoute'], 'x'), a2);
  assert.equal(r.agentCount, 2);
  assert.deepEqual(r.all(), [a2, b]);
  r.remove(a2);
  assert.equal(r.pick(['destHost'], 'shared'), b);
  assert.equal(r.pick(['destHost'], 'node-a'), undefined);
  assert.equal(r.readyFor('defaultRoute'), false);
  assert.equal(r.agentCount, 1);
});

test('remove() of a backend never added, or equal in name only, changes nothing', LIMIT, () => {
  const a = backend('node-a', 'host=node-a');
  const twin = backend('node-a', 'host=node-a');
  const r = registryWith(a);
  assert.equal(r.remove(twin), false);
  assert.equal(r.pick(['destHost'], 'node-a'), a);
  assert.equal(r.agentCount, 1);
});

test('a value advertised twice (or as both ipv4 and host) is indexed once and removed cleanly', LIMIT, () => {
  const a = backend('node-a', 'ipv4=10.0.0.5&host=10.0.0.5&ipv4=10.0.0.5');
  const r = registryWith(a);
  assert.equal(r.pick(['destHost'], '10.0.0.5'), a);
  r.remove(a);
  assert.equal(r.pick(['destHost'], '10.0.0.5'), undefined);
  assert.equal(r.readyFor('destHost'), false);
});

test('readyFor says whether a strategy could serve anything at all', LIMIT, () => {
  const r = new BackendRegistry();
  for (const s of PROXY_STRATEGIES) assert.equal(r.readyFor(s), false, s);
  // An agent that advertises nothing serves only the default strategy.
  r.add(new Backend({ agentID: 'bare', identifiers: emptyIdentifiers(), remoteAddress: '', certSubject: '' }, SILENT_LINK));
  assert.equal(r.readyFor('default'), true);
  assert.equal(r.readyFor('destHost'), false);
  assert.equal(r.readyFor('defaultRoute'), false);
  r.add(backend('node-a', 'host=node-a'));
  assert.equal(r.readyFor('destHost'), true);
  assert.equal(r.readyFor('defaultRoute'), false);
  r.add(backend('node-b', 'default-route=1'));
  assert.equal(r.readyFor('defaultRoute'), true);
});

test('after agents leave from the middle and the ends, the random choice reaches every remaining agent and no other', LIMIT, (t) => {
  const randomStartsAt = steerRandom(t);
  const names = ['a', 'b', 'c', 'd', 'e', 'f'];
  const streams = new Map(names.map((n) => [n, backend(`node-${n}`, 'default-route=true')]));
  const r = registryWith(...streams.values());
  for (const gone of ['c', 'a', 'f']) r.remove(streams.get(gone)!);
  for (const s of ['default', 'defaultRoute'] as const) {
    const picked = new Set<string>();
    for (let i = 0; i < 3; i++) {
      randomStartsAt(i, 3);
      picked.add(r.pick([s], 'x')!.agentID);
    }
    assert.deepEqual([...picked].sort(), ['node-b', 'node-d', 'node-e'], s);
  }
  assert.equal(r.agentCount, 3);
  assert.deepEqual(
    r
      .all()
      .map((b) => b.agentID)
      .sort(),
    ['node-b', 'node-d', 'node-e'],
  );
  // A draining agent is still skipped after the table was reordered by the removals.
  streams.get('d')!.draining = true;
  for (let i = 0; i < 3; i++) {
    randomStartsAt(i, 3);
    assert.notEqual(r.pick(['default'], 'x')!.agentID, 'node-d');
  }
});

test('picking an agent at random copies nothing, however many agents are connected (no collection in 2,000 picks of 10,000)', LIMIT, async () => {
  const gc = exposedGc();
  const r = new BackendRegistry();
  for (let i = 0; i < 10_000; i++) r.add(backend(`node-${i}`, 'default-route=true'));
  let scavenges = 0;
  const observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if ((e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MINOR) scavenges++;
  });
  gc();
  await setImmediate();
  observer.observe({ entryTypes: ['gc'] });
  const picked = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    picked.add(r.pick(['default'], 'x')!.agentID);
    picked.add(r.pick(['defaultRoute'], 'x')!.agentID);
  }
  // The observer hears of collections from an immediate after them.
  await setTimeout(50);
  observer.disconnect();
  // Copying the agents for each pick allocated ~80 KB a time here: 160 MB, dozens of scavenges.
  assert.ok(scavenges <= 1, `${scavenges} scavenges during the picks`);
  assert.ok(picked.size > 1000, `only ${picked.size} agents picked in 2,000 random picks of 10,000`);
});
