// npm run demo: the tunnel end to end on this machine, no cluster needed.
//
// Starts yurt-tunnel-server (local certificate mode) and yurt-tunnel-agent as
// real processes, and a stand-in kubelet (HTTPS, client certificate required)
// that only the agent's side reaches. Then talks to the kubelet through the
// server's CONNECT socket, as kube-apiserver's egress would, and shows what
// failures look like. `npm run demo -- --keep-running` leaves it all up.

import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { issueCertificate } from '../pkg/certs/pki.js';
import { dialThroughProxier, ProxierError } from '../pkg/interceptor/proxier-dialer.js';
import { StandinKubelet } from '../test/support/standin-kubelet/index.js';
import { freePort, startLocalTunnel } from './local-tunnel.js';

const keepRunning = process.argv.includes('--keep-running');

function say(text: string): void {
  process.stdout.write(text + '\n');
}

interface TLSFiles {
  ca: string;
  cert: string;
  key: string;
}

/** GET through the tunnel: CONNECT over the Unix socket, then TLS to the kubelet inside it. */
async function getThroughTunnel(uds: string, address: string, path: string, tls: TLSFiles, proxyHost?: string): Promise<{ status: number; body: string }> {
  const socket = await dialThroughProxier({ udsPath: uds, address, proxyHost, userAgent: 'yurt-tunnel-demo' });
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: address.split(':')[0],
        path,
        createConnection: () => tlsConnect({ socket, host: address.split(':')[0], ca: tls.ca, cert: tls.cert, key: tls.key }),
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

async function main(): Promise<void> {
  say('yurt-tunnel demo\n');
  say('1. yurt-tunnel-server in local certificate mode: makes its CA, listens for agents, opens the CONNECT socket');
  const tunnel = await startLocalTunnel({
    nodeName: 'edge-1',
    onStep: (step, detail) => {
      if (step === 'server') {
        say(`   ${detail}`);
        say('2. a client certificate for the agent of node "edge-1", issued by the server\'s CA');
      } else if (step === 'agent-cert') {
        say('3. yurt-tunnel-agent for edge-1 dials out to the server and waits for work');
      }
    },
  });
  const { certDir: pki, udsPath: uds } = tunnel;

  const ca = { cert: readFileSync(join(pki, 'ca.crt'), 'utf8'), key: readFileSync(join(pki, 'ca.key'), 'utf8') };
  const kubeletCert = issueCertificate(ca, { commonName: 'edge-1', ips: ['127.0.0.1'], usages: ['serverAuth'] });
  const kubelet = new StandinKubelet({ cert: kubeletCert.cert, key: kubeletCert.key, clientCA: ca.cert, nodeName: 'edge-1' });
  await kubelet.start();
  const kubeletAddress = `127.0.0.1:${kubelet.port}`;
  say(`4. a stand-in kubelet for edge-1 on https://${kubeletAddress} (client certificate required), reachable only through the agent`);

  // The caller presents the proxy-client identity the server issued, as the interceptor will.
  const client: TLSFiles = {
    ca: ca.cert,
    cert: readFileSync(join(pki, 'tunnel-proxy-client.crt'), 'utf8'),
    key: readFileSync(join(pki, 'tunnel-proxy-client.key'), 'utf8'),
  };

  say('\n5. requests to the kubelet through the tunnel (CONNECT over the Unix socket, then TLS inside):');
  for (const path of ['/healthz', '/containerLogs/default/web-1/app?tailLines=3', '/stats/summary']) {
    const started = performance.now();
    const r = await getThroughTunnel(uds, kubeletAddress, path, client);
    const ms = (performance.now() - started).toFixed(1);
    say(`   GET ${path} -> ${r.status} in ${ms} ms: ${JSON.stringify(r.body.trim().split('\n').join(' | ').slice(0, 90))}`);
  }
  const seen = kubelet.requests.at(-1)?.clientSubject;
  say(`   the kubelet saw the caller as CN=${seen?.commonName} O=${seen?.organizations.join(',')}`);

  say('\n6. failures get a status and a reason, never a 200 that closes:');
  const failures: Array<[string, string, string | undefined]> = [
    ['a node with no agent', kubeletAddress, 'edge-2'],
    ['a port nothing listens on', `127.0.0.1:${await freePort()}`, undefined],
    ['an address the agent\'s allow-list forbids', '192.0.2.10:10250', 'edge-1'],
  ];
  for (const [what, address, proxyHost] of failures) {
    try {
      await dialThroughProxier({ udsPath: uds, address, proxyHost });
      say(`   ${what}: unexpectedly connected`);
      process.exitCode = 1;
    } catch (err: unknown) {
      if (!(err instanceof ProxierError)) throw err;
      say(`   ${what}: ${err.status} ${err.reason}`);
    }
  }

  if (keepRunning) {
    say(`
Everything is still running. Try it yourself:
  # curl cannot CONNECT over a Unix socket; bridge it to a local TCP port first:
  socat TCP-LISTEN:18888,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:${uds} &
  curl -p -x http://127.0.0.1:18888 --cacert ${join(pki, 'ca.crt')} \\
       --cert ${join(pki, 'tunnel-proxy-client.crt')} --key ${join(pki, 'tunnel-proxy-client.key')} \\
       https://${kubeletAddress}/containerLogs/default/web-1/app
  # or, raw:  printf 'CONNECT ${kubeletAddress} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' | socat - UNIX-CONNECT:${uds}
Press Ctrl+C to stop.`);
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
  }

  say('\nstopping: agent (drains), server, kubelet');
  await tunnel.stop();
  await kubelet.close();
  say('done');
}

main().catch((err: unknown) => {
  process.stderr.write(`demo failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
