// The stand-in kubelet as a process of its own, for tests that run it inside
// a network namespace: `main.js CONFIG.json` with {host, port, cert, key,
// clientCA, nodeName} (PEM strings). Prints "ready <port>"; SIGTERM closes it.

import { readFileSync } from 'node:fs';
import { StandinKubelet, type StandinKubeletOptions } from './index.js';

const configFile = process.argv[2];
if (configFile === undefined) {
  process.stderr.write('usage: main.js CONFIG.json\n');
  process.exit(2);
}
const kubelet = new StandinKubelet(JSON.parse(readFileSync(configFile, 'utf8')) as StandinKubeletOptions);
await kubelet.start();
process.stdout.write(`ready ${kubelet.port}\n`);
process.on('SIGTERM', () => void kubelet.close().then(() => process.exit(0)));
