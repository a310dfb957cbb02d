import assert from 'node:assert/strict';
import { test } from 'node:test';
import { splitAnnotation, tunnelServerAddress } from '../../pkg/kube/tunnel-server-address.js';
import type { V1Node, V1Service } from '../../pkg/kube/types.js';

function svc(spec: V1Service['spec'], extra: { annotations?: Record<string, string>; ingress?: { ip?: string; hostname?: string }[] } = {}): V1Service {
  return {
    metadata: { name: 'x-tunnel-server-svc', namespace: 'kube-system', ...(extra.annotations ? { annotations: extra.annotations } : {}) },
    spec,
    ...(extra.ingress ? { status: { loadBalancer: { ingress: extra.ingress } } } : {}),
  };
}
const tcp = { name: 'tcp', port: 10262, targetPort: 10262, protocol: 'TCP' };
function cloud(name: string, ip: string, ready: boolean): V1Node {
  return {
    metadata: { name, labels: { 'openyurt.io/is-edge-worker': 'false' } },
    status: { addresses: [{ type: 'InternalIP', address: ip }], conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  };
}

test('LoadBalancer: the ingress IP (or hostname) on the tcp port; none yet is a problem', () => {
  assert.deepEqual(tunnelServerAddress(svc({ type: 'LoadBalancer', ports: [tcp] }, { ingress: [{ ip: '203.0.113.5' }] }), []), {
    address: '203.0.113.5:10262',
    from: 'the ingress of LoadBalancer Service kube-system/x-tunnel-server-svc',
  });
  assert.equal(
    (tunnelServerAddress(svc({ type: 'LoadBalancer', ports: [tcp] }, { ingress: [{ hostname: 'lb.example.com' }] }), []) as { address: string }).address,
    'lb.example.com:10262',
  );
  assert.match((tunnelServerAddress(svc({ type: 'LoadBalancer', ports: [tcp] }), []) as { problem: string }).problem, /without an ingress address yet/);
});

test("NodePort: a Ready cloud node's InternalIP (by name among equals) on the nodePort; IPv6 bracketed", () => {
  const s = svc({ type: 'NodePort', ports: [{ ...tcp, nodePort: 31008 }] });
  assert.deepEqual(tunnelServerAddress(s, [cloud('c-b', '10.0.0.2', true), cloud('c-a', '10.0.0.1', false), cloud('c-c', '10.0.0.3', true)]), {
    address: '10.0.0.2:31008',
    from: 'NodePort Service kube-system/x-tunnel-server-svc on cloud node c-b',
  });
  assert.equal((tunnelServerAddress(s, [cloud('c-6', 'fd00::6', true)]) as { address: string }).address, '[fd00::6]:31008');
  assert.match((tunnelServerAddress(s, []) as { problem: string }).problem, /no node labelled openyurt\.io\/is-edge-worker=false has an InternalIP/);
});

test("ClusterIP: the annotation's host and port (the tcp port when it names none); never the ClusterIP", () => {
  const s = (a?: string): V1Service =>
    svc({ type: 'ClusterIP', clusterIP: '10.96.0.20', ports: [tcp] }, a === undefined ? {} : { annotations: { 'x-tunnel-server-external-addr': a } });
  assert.equal((tunnelServerAddress(s('tunnel.example.com:443'), []) as { address: string }).address, 'tunnel.example.com:443');
  assert.equal((tunnelServerAddress(s('198.51.100.7'), []) as { address: string }).address, '198.51.100.7:10262');
  assert.equal((tunnelServerAddress(s('[2001:db8::7]:8443'), []) as { address: string }).address, '[2001:db8::7]:8443');
  const problem = (tunnelServerAddress(s(), []) as { problem: string }).problem;
  assert.match(
    problem,
    /^Service kube-system\/x-tunnel-server-svc is a ClusterIP Service \(10\.96\.0\.20\), which edge nodes cannot reach, and has no x-tunnel-server-external-addr annotation/,
  );
  assert.match(problem, /--tunnelserver-addr=<host>:<port>/);
  assert.match((tunnelServerAddress(s('host:99999'), []) as { problem: string }).problem, /is not <host>:<port>/);
});

test('a missing Service, a missing tcp port and other types are problems naming the Service', () => {
  assert.match((tunnelServerAddress(undefined, []) as { problem: string }).problem, /^Service kube-system\/x-tunnel-server-svc does not exist/);
  assert.match(
    (
      tunnelServerAddress(
        svc({
          type: 'NodePort',
          ports: [
            { name: 'a', port: 1 },
            { name: 'b', port: 2 },
          ],
        }),
        [],
      ) as { problem: string }
    ).problem,
    /no port named "tcp"/,
  );
  assert.match((tunnelServerAddress(svc({ type: 'ExternalName', ports: [tcp] }), []) as { problem: string }).problem, /has type ExternalName/);
});

test('annotation values', () => {
  assert.deepEqual(splitAnnotation(' a.example.com:31008 '), { host: 'a.example.com', port: 31008 });
  assert.deepEqual(splitAnnotation('::1'), { host: '::1' });
  assert.equal(splitAnnotation(':80'), undefined);
  assert.equal(splitAnnotation('a b:80'), undefined);
});
