// The stand-in kubelet answers every request kube-apiserver sent a kubelet in
// the recordings, exactly as recorded (see test/support/fixture-replay.ts).

import { defineFixtureReplay, expectedSubject, recordedKubeletOptions } from '../support/fixture-replay.js';
import { testPKI } from '../support/pki.js';
import { StandinKubelet } from '../support/standin-kubelet/index.js';

defineFixtureReplay('stand-in kubelet', async (h, acceptV5) => {
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
  return {
    kubelet,
    port: kubelet.port,
    // Straight from kube-apiserver: exactly what it sent, with its identity, no SNI, its ALPN.
    kubeletSees: (ex, sent) => ({ headers: sent, subject: expectedSubject(ex.tlsClientSubject), servername: false, alpn: ex.tls.alpnNegotiated ?? false }),
  };
});
