// Prometheus scrapes an edge exporter through the tunnel, the standard way:
// Debian's prometheus with `proxy_url: https://…` (our --http-proxy-port;
// Go's transport presents tls_config's client certificate to the https
// proxy too) scrapes Debian's prometheus-node-exporter by node name. The
// exporter and our agent live in a namespace `httpproxy-edge-…` that the
// cloud namespace (server, Prometheus) has no route into; the agent dials
// out to the server over a veth pair. A target port outside the allow-list
// is refused with 403 and a reason.

import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { writeAgentCertificate } from '../../pkg/certs/local-store.js';
import { harness } from '../support/harness.js';
import { commandSkipReason, NetworkNamespace, netnsSkipReason, probeTCP, vethPair } from '../support/netns/index.js';
import { AGENT_BIN, SERVER_BIN } from '../support/processes.js';
import { tempDir, waitFor } from '../support/tunnel.js';

const NODE_EXPORTER = '/usr/bin/prometheus-node-exporter';
const skip =
  netnsSkipReason() ??
  commandSkipReason('prometheus', 'apt-get install prometheus') ??
  commandSkipReason('prometheus-node-exporter', 'apt-get install prometheus-node-exporter') ??
  commandSkipReason('curl', 'apt-get install curl');

/** The cloud reaches the edge's 10.11.0.2 over a /30 (the agent's way out); the exporter listens on the edge's 10.21.0.1, which the cloud has no route to. */
const CLOUD_IP = '10.11.0.1';
const EDGE_IP = '10.11.0.2';
const NODE_IP = '10.21.0.1';
const PROXY_PORT = 10269;
const PROMETHEUS_PORT = 9090;

interface Target {
  labels: { job: string };
  health: string;
  lastError: string;
}

test(
  'Prometheus with proxy_url scrapes node_exporter on an edge node by node name; a port outside the allow-list is 403',
  { skip, timeout: 180_000 },
  async (t) => {
    const h = harness(t, { leakCheck: false });
    const dir = await tempDir(h);
    const cloud = await NetworkNamespace.create(h, 'httpproxy-cloud');
    const edge = await NetworkNamespace.create(h, 'httpproxy-edge');
    await vethPair({ ns: cloud, name: 'to-edge', addresses: [`${CLOUD_IP}/30`] }, { ns: edge, name: 'to-cloud', addresses: [`${EDGE_IP}/30`] });
    await edge.addAddress('lo', `${NODE_IP}/32`);

    // Our server in the cloud namespace, local certificate mode, the HTTP proxy on.
    const certDir = join(dir, 'server-pki');
    const server = cloud.startProcess(h, SERVER_BIN, [
      '--cert-dir',
      certDir,
      '--bind-address',
      '0.0.0.0',
      '--cert-ips',
      CLOUD_IP,
      '--interceptor-proxier-uds',
      join(dir, 'proxier.sock'),
      '--http-proxy-port',
      String(PROXY_PORT),
      '--startup-rehearsal=false',
      '--v',
      '2',
    ]);
    await server.waitForLine(/yurt-tunnel-server started/, 60_000);

    // The edge: node_exporter on the node's address, and our agent dialling out.
    edge.startProcess(
      h,
      NODE_EXPORTER,
      [`--web.listen-address=${NODE_IP}:9100`, '--collector.disable-defaults', '--collector.cpu', '--collector.meminfo'],
      {},
      {
        node: false,
      },
    );
    const agentFiles = await writeAgentCertificate({ certDir, nodeName: 'edge-1', outDir: join(dir, 'agent'), nodeIPs: [NODE_IP] });
    const agent = edge.startProcess(h, AGENT_BIN, [
      '--node-name',
      'edge-1',
      '--node-ip',
      NODE_IP,
      '--tunnelserver-addr',
      `${CLOUD_IP}:10262`,
      '--ca-file',
      agentFiles.caFile,
      '--cert-file',
      agentFiles.certFile,
      '--key-file',
      agentFiles.keyFile,
      '--startup-rehearsal=false',
      '--meta-port',
      '0',
    ]);
    await agent.waitForLine(/connected to tunnel server/, 60_000);
    // The cloud cannot reach the exporter itself.
    assert.deepEqual(await probeTCP(cloud, NODE_IP, 9100), { ok: false, code: 'ENETUNREACH' });

    // Prometheus in the cloud, its proxy our HTTP proxy port, with a client certificate from the server's CA.
    const client = await writeAgentCertificate({ certDir, nodeName: 'prometheus', outDir: join(dir, 'prometheus-client') });
    const tls = `    tls_config: { ca_file: ${client.caFile}, cert_file: ${client.certFile}, key_file: ${client.keyFile} }\n`;
    const job = (name: string, target: string): string =>
      `  - job_name: ${name}\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    proxy_url: https://127.0.0.1:${PROXY_PORT}\n${tls}` +
      `    static_configs: [{ targets: ['${target}'] }]\n`;
    const config = join(dir, 'prometheus.yml');
    await writeFile(
      config,
      `global: { scrape_interval: 1s, evaluation_interval: 1s }\nscrape_configs:\n${job('edge', 'edge-1:9100')}${job('denied', 'edge-1:9101')}`,
    );
    cloud.startProcess(
      h,
      'prometheus',
      [`--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`, `--web.listen-address=127.0.0.1:${PROMETHEUS_PORT}`],
      {},
      { node: false },
    );

    const api = async (path: string): Promise<unknown> => {
      const r = await cloud.run('curl', ['-sf', `http://127.0.0.1:${PROMETHEUS_PORT}${path}`]);
      if (r.code !== 0) return undefined;
      return (JSON.parse(r.stdout) as { data: unknown }).data;
    };
    const targets = async (): Promise<Target[]> => ((await api('/api/v1/targets')) as { activeTargets: Target[] } | undefined)?.activeTargets ?? [];
    const byJob = async (name: string): Promise<Target | undefined> => (await targets()).find((x) => x.labels.job === name);

    await waitFor('the edge target to be up', async () => (await byJob('edge'))?.health === 'up', 60_000);
    const up = (await api('/api/v1/query?query=up%7Bjob%3D%22edge%22%7D')) as { result: Array<{ value: [number, string] }> };
    assert.equal(up.result[0]?.value[1], '1');
    // node_exporter's own series arrived, from the collectors it runs.
    await waitFor(
      "node_exporter's series",
      async () =>
        (((await api('/api/v1/query?query=node_memory_MemTotal_bytes%7Bjob%3D%22edge%22%7D')) as { result: unknown[] } | undefined)?.result.length ?? 0) === 1,
      20_000,
    );
    const cpu = (await api('/api/v1/query?query=count(node_cpu_seconds_total%7Bjob%3D%22edge%22%7D)')) as { result: Array<{ value: [number, string] }> };
    assert.ok(Number(cpu.result[0]?.value[1]) > 0);

    // The port outside the allow-list: Prometheus sees the 403, a plain client the reason.
    await waitFor('the denied target to be scraped', async () => (await byJob('denied'))?.lastError !== '', 30_000);
    const denied = (await byJob('denied'))!;
    assert.equal(denied.health, 'down');
    assert.match(denied.lastError, /403 Forbidden/);
    // curl through our HTTP proxy port, with the same client certificate.
    const viaProxy = (args: string[]): ReturnType<typeof cloud.run> =>
      cloud.run('curl', [
        ...['--proxy', `https://127.0.0.1:${PROXY_PORT}`, '--proxy-cacert', client.caFile, '--proxy-cert', client.certFile, '--proxy-key', client.keyFile],
        ...args,
      ]);
    const r = await viaProxy(['-s', '-w', '\\n%{http_code}', 'http://edge-1:9101/metrics']);
    assert.equal(
      r.stdout,
      'port 9101 of edge-1 is not open to the HTTP proxy: allowed ports are 9100,10250,10255 ' +
        '(--http-proxy-allowed-ports, or http-proxy-allowed-ports in the server ConfigMap)\n\n403',
    );
    // And the same through curl's proxy to the allowed port: node_exporter's page.
    const ok = await viaProxy(['-sf', 'http://edge-1:9100/metrics']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^node_memory_MemTotal_bytes \d/m);
  },
);
