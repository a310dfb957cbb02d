// The benchmark's stand-in kubelet, in a process of its own. Its serving
// certificate and client CA come from the CA in the directory given as the
// first argument (the tunnel server's local CA). Prints its port.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { issueCertificate } from '../pkg/certs/pki.js';
import { StandinKubelet } from '../test/support/standin-kubelet/index.js';

const certDir = process.argv[2];
if (certDir === undefined) {
  process.stderr.write('usage: kubelet.js CERT_DIR\n');
  process.exit(2);
}
const ca = { cert: readFileSync(join(certDir, 'ca.crt'), 'utf8'), key: readFileSync(join(certDir, 'ca.key'), 'utf8') };
const serving = issueCertificate(ca, { commonName: 'bench', dnsNames: ['bench'], ips: ['127.0.0.1'], usages: ['serverAuth'] });
const kubelet = new StandinKubelet({ cert: serving.cert, key: serving.key, clientCA: ca.cert, nodeName: 'bench' });
await kubelet.start();
process.stdout.write(`${kubelet.port}\n`);
process.on('SIGTERM', () => void kubelet.close().then(() => process.exit(0)));
