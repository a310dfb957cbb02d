// npm run demo: the tunnel end to end on this machine, no cluster needed.
//
// Starts yurt-tunnel-server (local certificate mode) and yurt-tunnel-agent as
// real processes, and a stand-in kubelet (HTTPS, client certificate required)
// that only the agent's side reaches. Then talks to the kubelet through the
// server's CONNECT socket, as kube-apiserver's egress would, and shows what
// failures look like. `npm run demo -- --keep-running` leaves it all up.

import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { issueCertificate } from '../pkg/certs/pki.js';
import { dialThroughProxier } from '../pkg/interceptor/proxier-dialer.js';
import { CHANNEL, StandinKubelet, upgradeToChannelWebSocket } from '../test/support/standin-kubelet/index.js';
import { startLocalTunnel } from './local-tunnel.js';
import { freeLowPort } from './ports.js';
import { ProxierError } from '../pkg/interceptor/errors.js';

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

/** Reads `count` lines of a follow stream through the master port, then leaves. */
async function followLogs(port: number, host: string, tls: TLSFiles, count: number): Promise<Array<{ text: string; ms: number }>> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/containerLogs/default/web-1/app?follow=true', headers: { Host: host }, ...tls, servername: '' },
      (res) => {
        const got: Array<{ text: string; ms: number }> = [];
        let partial = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          partial += chunk;
          const parts = partial.split('\n');
          partial = parts.pop() ?? '';
          for (const text of parts) got.push({ text, ms: performance.now() - started });
          if (got.length >= count) {
            req.destroy();
            resolve(got.slice(0, count));
          }
        });
      },
    );
    req.on('error', (err) => (req.destroyed ? undefined : reject(err)));
    req.end();
  });
}

/** Runs `cat` through exec over WebSocket v5 via the master port and returns what came back. */
async function execEcho(port: number, host: string, tls: TLSFiles, text: string): Promise<{ stdout: string; status: string }> {
  const socket = tlsConnect({ host: '127.0.0.1', port, ...tls, servername: '', ALPNProtocols: ['http/1.1'] });
  await once(socket, 'secureConnect');
  const { client } = await upgradeToChannelWebSocket({
    socket,
    target: '/exec/default/web-1/app?command=cat&error=1&input=1&output=1',
    protocols: ['v5.channel.k8s.io'],
    host,
  });
  let stdout = '';
  let status = '';
  client.on('data', (channel: number, piece: Buffer) => {
    if (channel === CHANNEL.stdout) stdout += piece.toString();
    if (channel === CHANNEL.error) status += piece.toString();
  });
  const closed = once(client, 'closeFrame');
  client.write(CHANNEL.stdin, Buffer.from(text));
  client.closeChannel(CHANNEL.stdin);
  await closed;
  socket.destroy();
  return { stdout, status: (JSON.parse(status) as { status: string }).status };
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
    ['a port nothing listens on', `127.0.0.1:${await freeLowPort()}`, undefined],
    ["an address the agent's allow-list forbids", '192.0.2.10:10250', 'edge-1'],
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

  say('\n7. through the master port, as kube-apiserver calls a kubelet (its client certificate, Host = node name):');
  const apiserver = issueCertificate(ca, {
    commonName: 'kube-apiserver-kubelet-client',
    organizations: ['system:masters'],
    usages: ['clientAuth'],
  });
  const caller = { ca: ca.cert, cert: apiserver.cert, key: apiserver.key };
  const nodeHost = `edge-1:${kubelet.port}`;
  const lines = await followLogs(tunnel.securePort, nodeHost, caller, 4);
  say(`   GET /containerLogs/default/web-1/app?follow=true: ${lines.map((l) => JSON.stringify(l.text) + ` after ${l.ms.toFixed(0)} ms`).join(', ')}`);
  const ended = await kubelet.waitForFollowEnded(1, 2000);
  say(`   closed the stream; the kubelet's log stream ended (${ended[0]?.endReason})`);
  const echoed = await execEcho(tunnel.securePort, nodeHost, caller, 'hello through the tunnel');
  say(`   exec cat over WebSocket v5.channel.k8s.io: stdout ${JSON.stringify(echoed.stdout)}, status ${echoed.status}`);

  if (keepRunning) {
    say(`
Everything is still running. Try it yourself:
  # curl cannot CONNECT over a Unix socket; bridge it to a local TCP port first:
  socat TCP-LISTEN:18888,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:${uds} &
  curl -p -x http://127.0.0.1:18888 --cacert ${join(pki, 'ca.crt')} \\
       --cert ${join(pki, 'tunnel-proxy-client.crt')} --key ${join(pki, 'tunnel-proxy-client.key')} \\
       https://${kubeletAddress}/containerLogs/default/web-1/app
  # or, raw:  printf 'CONNECT ${kubeletAddress} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n' | socat - UNIX-CONNECT:${uds}
  # through the master port (HTTPS, client certificate from the server's CA; Host names the node):
  curl --cacert ${join(pki, 'ca.crt')} --cert ${join(pki, 'tunnel-proxy-client.crt')} --key ${join(pki, 'tunnel-proxy-client.key')} \\
       -H 'Host: edge-1:${kubelet.port}' https://127.0.0.1:${tunnel.securePort}/stats/summary
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
  process.stderr.write(`demo failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
