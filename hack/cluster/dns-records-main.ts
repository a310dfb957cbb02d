// The DNS route's record sync on the local cluster: what the kubelet's
// ConfigMap volume and CoreDNS's `hosts` plugin with `reload` do for
// yurt-tunnel-dns (manifests/overlays/dns), for dnsmasq in the cloud node
// (dns-resolver.ts): every version of kube-system/yurt-tunnel-nodes (the
// server's DNS controller's records) becomes dnsmasq's hosts file, then a
// SIGHUP makes dnsmasq read it again.
//
// node dns-records-main.js <kubeconfig> <hosts file> <dnsmasq pid file>

import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { TUNNEL_NODES_CONFIGMAP, TUNNEL_NODES_KEY } from '../../pkg/dns/records.js';
import { createKubeClient } from '../../pkg/kube/client.js';
import { configMapInformer } from '../../pkg/kube/config-map-informer.js';
import { createLogger } from '../../pkg/log/logger.js';

const args = process.argv.slice(2);
if (args.length !== 3) {
  process.stderr.write('usage: dns-records-main.js <kubeconfig> <hosts file> <dnsmasq pid file>\n');
  process.exit(2);
}
const [kubeconfig, hostsFile, pidFile] = args as [string, string, string];

const logger = createLogger();
let served: string | undefined;

function serve(text: string | undefined): void {
  const records = text ?? '';
  if (records === served) return;
  writeFileSync(`${hostsFile}.tmp`, `${records}\n`);
  renameSync(`${hostsFile}.tmp`, hostsFile);
  served = records;
  try {
    process.kill(Number(readFileSync(pidFile, 'utf8').trim()), 'SIGHUP');
    logger.info('records served', { records: records === '' ? 0 : records.split('\n').length });
  } catch (err: unknown) {
    logger.error('cannot signal dnsmasq to read the records again', { pidFile, err: (err as Error).message });
  }
}

const records = configMapInformer(createKubeClient({ kind: 'kubeconfig', path: kubeconfig }), 'kube-system', TUNNEL_NODES_CONFIGMAP, logger);
records.addHandler({
  add: (cm) => serve(cm.data?.[TUNNEL_NODES_KEY]),
  update: (_old, cm) => serve(cm.data?.[TUNNEL_NODES_KEY]),
  delete: () => serve(undefined),
});
records.start();
// The informer's retry timers do not hold the process (a library's must not): this one does, until SIGTERM.
const running = setInterval(() => undefined, 3_600_000);
process.on('SIGTERM', () => {
  clearInterval(running);
  void records.stop();
});
