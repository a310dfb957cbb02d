// The stand-in kubelet in a process of its own, for tests that run it inside
// a network namespace. Options as JSON in the first argument (certificate,
// key, client CA, host, port, node name); prints "listening <port>", and on
// each request "request <method> <target> <client CN>"; SIGTERM closes it.

import { StandinKubelet, type StandinKubeletOptions } from './index.js';

const opts = JSON.parse(process.argv[2]!) as StandinKubeletOptions;
const kubelet = new StandinKubelet(opts);
await kubelet.start();
process.stdout.write(`listening ${kubelet.port}\n`);
let reported = 0;
const report = setInterval(() => {
  for (const r of kubelet.requests.slice(reported)) process.stdout.write(`request ${r.method} ${r.target} ${r.clientSubject.commonName}\n`);
  reported = kubelet.requests.length;
}, 50);
process.on('SIGTERM', () => {
  clearInterval(report);
  void kubelet.close().then(() => process.exit(0));
});
