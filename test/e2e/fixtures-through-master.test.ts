// Every request kube-apiserver sent a kubelet in the recordings, sent the same
// way (its TLS behaviour, its client certificate, its header lines) to the
// secure master port instead: it must reach the stand-in kubelet on the right
// node through the tunnel and come back answered exactly as recorded.
//
// The node and pod lookups are filled as the Kubernetes integration fills
// them (node edge-1 at 127.0.0.1 with its kubelet port; pod default/p1 on it):
// kube-apiserver's exec, attach and port-forward requests carry its own
// address in Host, so only the pod path says where they go.

import type { NodeInfo, NodeResolver } from '../../pkg/nodes/node-resolver.js';
import { defineFixtureReplay, recordedKubeletOptions } from '../support/fixture-replay.js';
import { proxyClientCert, startMaster } from '../support/master.js';
import { testPKI } from '../support/pki.js';
import { StandinKubelet } from '../support/standin-kubelet/index.js';
import { startTunnel } from '../support/tunnel.js';

/** What a kubelet never sees from a proxy: hop-by-hop headers (an upgrade keeps Connection and Upgrade). */
const HOP_BY_HOP = ['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade'];

defineFixtureReplay('through the master port', async (h, acceptV5) => {
  const pki = testPKI();
  const kubelet = new StandinKubelet({
    cert: pki.server.cert,
    key: pki.server.key,
    clientCA: pki.ca.cert,
    nodeName: 'edge-1',
    ...recordedKubeletOptions(acceptV5),
  });
  h.defer(() => kubelet.close());
  await kubelet.start();
  const { server } = await startTunnel(h);
  const node: NodeInfo = { name: 'edge-1', addresses: ['127.0.0.1'], kubeletPort: kubelet.port };
  const resolver: NodeResolver = {
    node: (name) => (name === 'edge-1' ? node : undefined),
    nodesByIP: (ip) => (ip === '127.0.0.1' ? [node] : []),
    podNode: (namespace, pod) => (namespace === 'default' && pod === 'p1' ? node : undefined),
  };
  const { securePort } = await startMaster(h, server, { resolver });
  const proxy = proxyClientCert();
  const { X509Certificate } = await import('node:crypto');
  const subject = new X509Certificate(proxy.cert).subject;
  return {
    kubelet,
    port: securePort,
    kubeletSees: (_ex, sent) => {
      const upgrade = sent.some(([k]) => k.toLowerCase() === 'upgrade');
      const headers = sent.filter(([k]) => !HOP_BY_HOP.includes(k.toLowerCase()) || (upgrade && ['connection', 'upgrade'].includes(k.toLowerCase())));
      // The master port marks what it forwards (a request that comes back with it is a loop).
      const marked: Array<[string, string]> = [...headers, ['Via', '1.1 yurt-tunnel-server']];
      return {
        // Pooled requests go through a keep-alive HTTP client, which says so.
        headers: upgrade ? marked : [...marked, ['Connection', 'keep-alive']],
        subject: { commonName: /CN=(.*)/.exec(subject)![1]!, organizations: [...subject.matchAll(/^O=(.*)$/gm)].map((m) => m[1]!) },
        // The tunnel knows the node's name, so it asks for it.
        servername: 'edge-1',
        alpn: 'http/1.1',
      };
    },
  };
});
