// The server ConfigMap's parser (spec/yurttunnel.md §5), one rule at a time.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { describeServerConfig, masterPortMappings, parseServerConfig, sameServerConfig, type ParsedServerConfig } from '../../pkg/kube/server-config.js';

const defaults = { insecurePort: 10264, localhostProxyPorts: [10266] };

function parse(data: Record<string, string> | undefined): ParsedServerConfig {
  return parseServerConfig(data, defaults);
}

function ports(p: ParsedServerConfig): [number, string][] {
  return [...p.config.proxyPorts];
}

test("no ConfigMap: no extra ports, the flag's localhost ports; 10250 and 10255 always map", () => {
  const p = parse(undefined);
  assert.deepEqual(ports(p), []);
  assert.deepEqual([...p.config.localhostProxyPorts], [10266]);
  assert.deepEqual(p.problems, []);
  assert.deepEqual(
    [...masterPortMappings(p.config)],
    [
      [10250, 'secure'],
      [10255, 'insecure'],
    ],
  );
});

test('http and https proxy ports map to the insecure and secure master ports, trimmed, sorted', () => {
  const p = parse({ 'http-proxy-ports': ' 9100, 8080 ,', 'https-proxy-ports': '9443' });
  assert.deepEqual(ports(p), [
    [8080, 'insecure'],
    [9100, 'insecure'],
    [9443, 'secure'],
  ]);
  assert.deepEqual(p.problems, []);
  assert.deepEqual(
    [...masterPortMappings(p.config)].map(([port]) => port),
    [8080, 9100, 9443, 10250, 10255],
  );
  assert.equal(describeServerConfig(p.config), 'http=8080,9100 https=9443 localhost=10266 proxy-allowed=9100,10250,10255');
});

test('a bad entry is skipped with a problem naming the key and the value; the rest applies', () => {
  const p = parse({ 'http-proxy-ports': '9100,abc,0,65536,70000', 'https-proxy-ports': '9443,-1', 'localhost-proxy-ports': '10267, x' });
  assert.deepEqual(ports(p), [
    [9100, 'insecure'],
    [9443, 'secure'],
  ]);
  assert.deepEqual([...p.config.localhostProxyPorts], [10267]);
  assert.deepEqual(p.problems, [
    'http-proxy-ports: "abc" is not a port (1-65535); skipped',
    'http-proxy-ports: "0" is not a port (1-65535); skipped',
    'http-proxy-ports: "65536" is not a port (1-65535); skipped',
    'http-proxy-ports: "70000" is not a port (1-65535); skipped',
    'https-proxy-ports: "-1" is not a port (1-65535); skipped',
    'localhost-proxy-ports: "x" is not a port (1-65535); skipped',
  ]);
});

test('10250 and 10255 are removed from the proxy ports, with a problem', () => {
  const p = parse({ 'http-proxy-ports': '10250,9100', 'https-proxy-ports': '10255' });
  assert.deepEqual(ports(p), [[9100, 'insecure']]);
  assert.deepEqual(p.problems, [
    'http-proxy-ports: "10250": port 10250 is the kubelet\'s and always goes to the secure master port; skipped',
    'https-proxy-ports: "10255": port 10255 is the kubelet\'s and always goes to the insecure master port; skipped',
  ]);
  assert.deepEqual(
    [...masterPortMappings(p.config)].filter(([port]) => port >= 10250),
    [
      [10250, 'secure'],
      [10255, 'insecure'],
    ],
  );
});

test('a port in both lists goes to the secure master port (https-proxy-ports is read last, as OpenYurt)', () => {
  const p = parse({ 'http-proxy-ports': '9000', 'https-proxy-ports': '9000' });
  assert.deepEqual(ports(p), [[9000, 'secure']]);
  assert.deepEqual(p.problems, ['https-proxy-ports: "9000": port 9000 is also in http-proxy-ports; it goes to the secure master port']);
});

test('dnat-ports-pair (deprecated): with any "=", only pairs to the insecure port are kept, as HTTP ports', () => {
  const p = parse({ 'dnat-ports-pair': '9100=10264, 9200=10263, 9300, x=10264, 9400=10264=1' });
  assert.deepEqual(ports(p), [[9100, 'insecure']]);
  assert.deepEqual(p.problems, [
    'dnat-ports-pair: "9200=10263": only pairs to the insecure port 10264 are honoured; use https-proxy-ports for the secure one; skipped',
    'dnat-ports-pair: "9300" is not <port>=10264; skipped',
    'dnat-ports-pair: "x=10264" is not <port>=10264; skipped',
    'dnat-ports-pair: "9400=10264=1" is not <port>=10264; skipped',
  ]);
  // The right side is the server's own --insecure-port.
  assert.deepEqual(
    [...parseServerConfig({ 'dnat-ports-pair': '9100=10264,9200=20264' }, { ...defaults, insecurePort: 20264 }).config.proxyPorts],
    [[9200, 'insecure']],
  );
});

test('dnat-ports-pair without "=" is a plain list of HTTP ports', () => {
  const p = parse({ 'dnat-ports-pair': '9100, 9200' });
  assert.deepEqual(ports(p), [
    [9100, 'insecure'],
    [9200, 'insecure'],
  ]);
});

test("localhost-proxy-ports: the ConfigMap's key replaces the flag's ports, even when empty; absent, the flag's apply", () => {
  assert.deepEqual([...parse({ 'localhost-proxy-ports': '10267, 10266' }).config.localhostProxyPorts], [10266, 10267]);
  assert.deepEqual([...parse({ 'localhost-proxy-ports': '' }).config.localhostProxyPorts], []);
  assert.deepEqual([...parse({ 'http-proxy-ports': '9100' }).config.localhostProxyPorts], [10266]);
});

test('sameServerConfig compares the parsed values, not the text', () => {
  assert.ok(sameServerConfig(parse({ 'http-proxy-ports': '9100,8080' }).config, parse({ 'http-proxy-ports': ' 8080 , 9100' }).config));
  assert.ok(!sameServerConfig(parse({ 'http-proxy-ports': '9100' }).config, parse({ 'https-proxy-ports': '9100' }).config));
  assert.ok(!sameServerConfig(parse({}).config, parse({ 'localhost-proxy-ports': '' }).config));
});

test('http-proxy-allowed-ports: the flag until the key says otherwise; an empty key allows nothing; bad entries skipped', () => {
  assert.deepEqual([...parse(undefined).config.httpProxyAllowedPorts], [9100, 10250, 10255]);
  assert.deepEqual([...parseServerConfig(undefined, { ...defaults, httpProxyAllowedPorts: [8080] }).config.httpProxyAllowedPorts], [8080]);
  const p = parse({ 'http-proxy-allowed-ports': '9256, 9100,x' });
  assert.deepEqual([...p.config.httpProxyAllowedPorts], [9100, 9256]);
  assert.deepEqual(p.problems, ['http-proxy-allowed-ports: "x" is not a port (1-65535); skipped']);
  assert.deepEqual([...parse({ 'http-proxy-allowed-ports': '' }).config.httpProxyAllowedPorts], []);
  assert.equal(sameServerConfig(parse(undefined).config, p.config), false);
});

test('tcp-proxy-ports: [<listen-ip>:]<port>=<node>/<host>:<port>; bad and repeated entries skipped, naming them', () => {
  const p = parse({ 'tcp-proxy-ports': '16443=edge-1/127.0.0.1:6443, 0.0.0.0:2222=edge-2/[fd00::1]:22, [::1]:3333=edge-1/db.local:5432' });
  assert.deepEqual(p.problems, []);
  assert.deepEqual(
    [...p.config.tcpProxyPorts.values()],
    [
      { listenHost: '0.0.0.0', port: 2222, node: 'edge-2', address: '[fd00::1]:22' },
      { listenHost: '::1', port: 3333, node: 'edge-1', address: 'db.local:5432' },
      { listenHost: undefined, port: 16443, node: 'edge-1', address: '127.0.0.1:6443' },
    ],
  );
  assert.match(
    describeServerConfig(p.config),
    / tcp=0\.0\.0\.0:2222=edge-2\/\[fd00::1\]:22,\[::1\]:3333=edge-1\/db\.local:5432,16443=edge-1\/127\.0\.0\.1:6443$/,
  );
  const bad = parse({ 'tcp-proxy-ports': '16443=edge-1/127.0.0.1:6443,16443=edge-2/127.0.0.1:1,7000=Edge_1/x:1,7001=edge-1/x,7002,host:7003=edge-1/x:1' });
  assert.deepEqual([...bad.config.tcpProxyPorts.keys()], [16443]);
  assert.deepEqual(bad.problems, [
    'tcp-proxy-ports: "16443=edge-2/127.0.0.1:1": port 16443 is mapped already; skipped',
    'tcp-proxy-ports: "7000=Edge_1/x:1": "Edge_1" is not a node name; skipped',
    'tcp-proxy-ports: "7001=edge-1/x": "x" is not <host>:<port>; skipped',
    'tcp-proxy-ports: "7002" is not [<listen-ip>:]<port>=<node>/<host>:<port>; skipped',
    'tcp-proxy-ports: "host:7003=edge-1/x:1": "host:7003" is not <port> or <listen-ip>:<port>; skipped',
  ]);
});
