// The master server's middleware and the interceptor's helpers, one rule at a time.

import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { test } from 'node:test';
import { localhostProxy } from '../../pkg/interceptor/middleware/localhost-proxy.js';
import { masterPortTLS } from '../../pkg/interceptor/middleware/master-port-tls.js';
import { traceRequest } from '../../pkg/interceptor/middleware/trace-request.js';
import type { NodeInfo, NodeResolver } from '../../pkg/nodes/node-resolver.js';
import { connectRequest } from '../../pkg/interceptor/proxier-dialer.js';
import { pathClass, splitAddress, type RequestContext } from '../../pkg/interceptor/request-context.js';
import { failureFor, forwardedHeaders } from '../../pkg/interceptor/request-interceptor.js';
import { readResponseHead } from '../../pkg/interceptor/response-head.js';
import { MemoryLogger } from '../support/memory-logger.js';
import { DialError } from '../../pkg/protocol/errors.js';
import { HttpError, KubeletTLSError } from '../../pkg/interceptor/errors.js';

const edge1: NodeInfo = { name: 'edge-1', addresses: ['10.0.0.5'], kubeletPort: 10250 };
const edge6: NodeInfo = { name: 'edge-6', addresses: ['fd00::6'] };
const twinA: NodeInfo = { name: 'twin-a', addresses: ['10.0.0.9'] };
const twinB: NodeInfo = { name: 'twin-b', addresses: ['10.0.0.9'] };
const bare: NodeInfo = { name: 'bare', addresses: [] };
const nodes = [edge1, edge6, twinA, twinB, bare];

const resolver: NodeResolver = {
  node: (name) => nodes.find((n) => n.name === name),
  nodesByIP: (ip) => nodes.filter((n) => n.addresses.includes(ip)),
  podNode: (ns, pod) => (ns === 'default' && pod === 'web-1' ? edge1 : undefined),
};

function ctx(over: Partial<RequestContext>): RequestContext {
  return {
    method: 'GET',
    url: '/healthz',
    tls: true,
    dialAddress: '10.0.0.5:10250',
    proxyHost: undefined,
    proxyDest: undefined,
    forwardedUri: undefined,
    serverName: undefined,
    ...over,
  };
}

const trace = traceRequest(resolver, new MemoryLogger());

function traced(over: Partial<RequestContext>): Pick<RequestContext, 'dialAddress' | 'proxyHost'> {
  const c = ctx(over);
  trace(c);
  return { dialAddress: c.dialAddress, proxyHost: c.proxyHost };
}

test("trace: a pod path goes to the pod's node and its kubelet port, whatever the Host says", () => {
  assert.deepEqual(traced({ url: '/exec/default/web-1/app?command=ls', dialAddress: '127.0.0.1:6443' }), {
    dialAddress: '10.0.0.5:10250',
    proxyHost: 'edge-1',
  });
  assert.deepEqual(traced({ url: '/containerLogs/default/web-1/app', dialAddress: '10.0.0.5:10250' }), { dialAddress: '10.0.0.5:10250', proxyHost: 'edge-1' });
});

test('trace: an unknown pod falls back to the Host', () => {
  assert.deepEqual(traced({ url: '/exec/default/nope/app', dialAddress: '10.0.0.7:10250' }), { dialAddress: '10.0.0.7:10250', proxyHost: undefined });
});

test('trace: a node-proxy request goes to the node in X-Forwarded-Uri, in each of its name forms', () => {
  for (const [uri, port] of [
    ['/api/v1/nodes/edge-1/proxy/metrics', 10250],
    ['/api/v1/nodes/edge-1:10255/proxy/metrics', 10255],
    ['/api/v1/nodes/https:edge-1:10250/proxy/stats/summary', 10250],
    ['/api/v1/nodes/edge-1/proxy', 10250],
  ] as const) {
    assert.deepEqual(traced({ forwardedUri: uri, dialAddress: '127.0.0.1:6443' }), { dialAddress: `10.0.0.5:${port}`, proxyHost: 'edge-1' }, uri);
  }
  assert.throws(
    () => traced({ forwardedUri: '/api/v1/nodes/edge-9/proxy/metrics' }),
    new HttpError(400, 'node "edge-9" is not known to the tunnel server: no connected agent advertises it'),
  );
});

test('trace: a TLS server name that names a node routes there', () => {
  assert.deepEqual(traced({ serverName: 'edge-1', dialAddress: '127.0.0.1:6443' }), { dialAddress: '10.0.0.5:10250', proxyHost: 'edge-1' });
  // A server name that is no node is just ignored.
  assert.deepEqual(traced({ serverName: 'kubernetes', dialAddress: '10.0.0.7:10250' }), { dialAddress: '10.0.0.7:10250', proxyHost: undefined });
});

test('trace: a Host that is a node name; IPv6 addresses are bracketed; unknown names and nodes without addresses get 400', () => {
  assert.deepEqual(traced({ dialAddress: 'edge-1:10250' }), { dialAddress: '10.0.0.5:10250', proxyHost: 'edge-1' });
  assert.deepEqual(traced({ dialAddress: 'edge-6:10250' }), { dialAddress: '[fd00::6]:10250', proxyHost: 'edge-6' });
  assert.throws(() => traced({ dialAddress: 'ghost:10250' }), {
    status: 400,
    message: 'node "ghost" is not known to the tunnel server: no connected agent advertises it',
  });
  assert.throws(() => traced({ dialAddress: 'bare:10250' }), {
    status: 400,
    message: 'node "bare" has no known address (no InternalIP, and its agent advertises no ipv4 or ipv6 identifier)',
  });
});

test("trace: a caller's own X-Tunnel-Proxy-Host is kept", () => {
  assert.deepEqual(traced({ dialAddress: 'edge-1:10250', proxyHost: 'chosen' }), { dialAddress: '10.0.0.5:10250', proxyHost: 'chosen' });
});

test('trace: an IP Host stays, unless X-Tunnel-Proxy-Dest says otherwise; a bad Dest or Host is 400', () => {
  assert.deepEqual(traced({ dialAddress: '10.0.0.7:10250' }), { dialAddress: '10.0.0.7:10250', proxyHost: undefined });
  assert.deepEqual(traced({ dialAddress: '10.0.0.7:10250', proxyDest: '10.0.0.8:9100' }), { dialAddress: '10.0.0.8:9100', proxyHost: undefined });
  assert.throws(() => traced({ proxyDest: 'nowhere' }), { status: 400, message: 'X-Tunnel-Proxy-Dest "nowhere" is not ip:port' });
  assert.throws(() => traced({ dialAddress: '' }), { status: 400, message: 'Host "" is not host:port' });
});

test("localhost proxy: listed ports go to the node's loopback, the node chosen by its address", () => {
  const ports = new Set([10266]);
  const lp = localhostProxy(() => ports, resolver);
  const run = (over: Partial<RequestContext>): Pick<RequestContext, 'dialAddress' | 'proxyHost'> => {
    const c = ctx(over);
    lp(c);
    return { dialAddress: c.dialAddress, proxyHost: c.proxyHost };
  };
  assert.deepEqual(run({ dialAddress: '10.0.0.5:10266' }), { dialAddress: '127.0.0.1:10266', proxyHost: 'edge-1' });
  assert.deepEqual(run({ dialAddress: '[fd00::6]:10266' }), { dialAddress: '[::1]:10266', proxyHost: 'edge-6' });
  assert.deepEqual(run({ dialAddress: '10.0.0.5:10250' }), { dialAddress: '10.0.0.5:10250', proxyHost: undefined }, 'other ports pass');
  assert.deepEqual(run({ dialAddress: '10.0.0.9:10266', proxyHost: 'twin-b' }), { dialAddress: '127.0.0.1:10266', proxyHost: 'twin-b' });
  assert.throws(() => run({ dialAddress: '10.0.0.9:10266' }), {
    status: 400,
    message: 'nodes twin-a, twin-b all have address 10.0.0.9; send X-Tunnel-Proxy-Host to choose one',
  });
  assert.throws(() => run({ dialAddress: '10.0.0.77:10266' }), {
    status: 400,
    message: 'no node has address 10.0.0.77, so its localhost port 10266 cannot be reached; send X-Tunnel-Proxy-Host',
  });
  // The set is read per request: a reload applies at once.
  ports.clear();
  assert.deepEqual(run({ dialAddress: '10.0.0.5:10266' }), { dialAddress: '10.0.0.5:10266', proxyHost: undefined });
});

test('metrics path classes are bounded', () => {
  const cases: Array<[string, string]> = [
    ['/containerLogs/ns/p/c?follow=true', 'logs'],
    ['/logs/messages', 'logs'],
    ['/exec/ns/p/c', 'exec'],
    ['/attach/ns/p/c', 'attach'],
    ['/portForward/ns/p', 'portforward'],
    ['/metrics/cadvisor', 'metrics'],
    ['/metrics', 'metrics'],
    ['/stats/summary', 'stats'],
    ['/healthz', 'other'],
    ['/pods', 'other'],
  ];
  for (const [url, want] of cases) assert.equal(pathClass(url), want, url);
});

test('addresses split with IPv6 in brackets; bad ones are refused', () => {
  assert.deepEqual(splitAddress('[fd00::1]:443'), { host: 'fd00::1', port: 443 });
  assert.deepEqual(splitAddress('edge-1:10250'), { host: 'edge-1', port: 10250 });
  for (const bad of ['edge-1', 'fd00::1:443', 'x:0', 'x:70000', 'a b:1']) assert.equal(splitAddress(bad), undefined, bad);
});

test('forwarded headers drop hop-by-hop and routing headers, keep order and spelling, keep Connection/Upgrade for upgrades', () => {
  const raw = [
    'Host',
    'h:1',
    'Connection',
    'Upgrade',
    'Upgrade',
    'SPDY/3.1',
    'X-Tunnel-Proxy-Host',
    'edge-1',
    'Keep-Alive',
    'x',
    'TE',
    'trailers',
    'X-Stream-Protocol-Version',
    'v4',
  ];
  assert.deepEqual(forwardedHeaders(raw, false), ['Host', 'h:1', 'X-Stream-Protocol-Version', 'v4']);
  assert.deepEqual(forwardedHeaders(raw, true), ['Host', 'h:1', 'Connection', 'Upgrade', 'Upgrade', 'SPDY/3.1', 'X-Stream-Protocol-Version', 'v4']);
});

test('failures map to statuses callers can act on', () => {
  const c = ctx({ proxyHost: 'edge-1', dialAddress: '10.0.0.5:10250' });
  const nodeNameOf = (host: string): string | undefined => (host === '10.0.0.5' ? 'edge-1' : undefined);
  // A dial's failure keeps the CONNECT proxier's status and reason, naming the node when no agent took the dial.
  assert.deepEqual(failureFor(new DialError('YT_ERR_NO_AGENT', 'no agent serves 10.0.0.5'), ctx({}), nodeNameOf), {
    status: 503,
    reason: 'node edge-1: no agent serves 10.0.0.5',
  });
  assert.deepEqual(failureFor(new DialError('YT_ERR_NO_AGENT', 'no agent serves edge-1 (X-Tunnel-Proxy-Host edge-1)'), c), {
    status: 503,
    reason: 'no agent serves edge-1 (X-Tunnel-Proxy-Host edge-1)',
  });
  assert.deepEqual(failureFor(new DialError('YT_ERR_DIAL_FAILED', 'agent edge-1 could not dial 10.0.0.5:10250: refused'), c, nodeNameOf), {
    status: 502,
    reason: 'agent edge-1 could not dial 10.0.0.5:10250: refused',
  });
  assert.deepEqual(failureFor(new DialError('YT_ERR_DIAL_TIMEOUT', 'timed out'), c), { status: 504, reason: 'timed out' });
  assert.deepEqual(failureFor(new KubeletTLSError('TLS handshake with the kubelet of node edge-1 at 10.0.0.5:10250 failed: x'), c), {
    status: 502,
    reason: 'TLS handshake with the kubelet of node edge-1 at 10.0.0.5:10250 failed: x',
  });
  assert.deepEqual(failureFor(new Error('socket hang up'), c), {
    status: 502,
    reason: 'connection to the kubelet of node edge-1 at 10.0.0.5:10250 failed: socket hang up',
  });
});

test('a response head is read with its exact bytes, however it arrives', async () => {
  const text = 'HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n';
  for (const cut of [1, 7, 1000]) {
    const s = new PassThrough();
    const reading = readResponseHead(s);
    const all = Buffer.from(text + 'FRAMES');
    for (let i = 0; i < all.length; i += cut) s.write(all.subarray(i, i + cut));
    const head = await reading;
    assert.equal(head.raw.toString(), text);
    assert.equal(head.status, 101);
    assert.equal(head.headers.get('upgrade'), 'SPDY/3.1');
    // Bytes after the head are either in `rest` or still in the stream.
    const after = Buffer.concat([head.rest, ...([s.read()].filter(Boolean) as Buffer[])]);
    assert.equal(after.toString(), 'FRAMES');
  }
  const bad = new PassThrough();
  const failing = readResponseHead(bad);
  bad.end('garbage\r\n\r\n');
  await assert.rejects(failing, { message: 'malformed response status line "garbage"' });
});

test("the proxier client's CONNECT request is exactly OpenYurt's interceptor's, each optional header only when set", () => {
  assert.equal(connectRequest('10.0.0.5:10250'), 'CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: localhost\r\n\r\n');
  assert.equal(
    connectRequest('10.0.0.5:10250', 'edge-1', 'kube-apiserver/v1.24'),
    'CONNECT 10.0.0.5:10250 HTTP/1.1\r\nHost: localhost\r\nX-Tunnel-Proxy-Host: edge-1\r\nUser-Agent: kube-apiserver/v1.24\r\n\r\n',
  );
  assert.equal(connectRequest('[fd00::1]:10250', undefined, 'ua'), 'CONNECT [fd00::1]:10250 HTTP/1.1\r\nHost: localhost\r\nUser-Agent: ua\r\n\r\n');
});

test('master-port TLS: a TLS caller gets plain HTTP to a port of the insecure master port, TLS to any other; a plain caller never gets TLS', () => {
  const mappings = new Map([
    [10250, 'secure'],
    [10255, 'insecure'],
    [9100, 'insecure'],
    [9443, 'secure'],
  ] as const);
  const tls = masterPortTLS(() => mappings);
  const farEnd = (over: Partial<RequestContext>): boolean => {
    const c = ctx(over);
    tls(c);
    return c.tls;
  };
  assert.equal(farEnd({ dialAddress: '10.0.0.5:10250' }), true);
  assert.equal(farEnd({ dialAddress: '10.0.0.5:9443' }), true);
  assert.equal(farEnd({ dialAddress: '10.0.0.5:8443' }), true, "an unmapped port keeps the caller's TLS");
  assert.equal(farEnd({ dialAddress: '10.0.0.5:10255' }), false);
  assert.equal(farEnd({ dialAddress: '[fd00::6]:9100' }), false);
  assert.equal(farEnd({ dialAddress: '10.0.0.5:10250', tls: false }), false);
  assert.equal(farEnd({ dialAddress: '10.0.0.5:9443', tls: false }), false);
});
