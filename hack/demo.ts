// npm run demo: the tunnel end to end on this machine, no cluster needed.
//
// Starts yurt-tunnel-server (local certificate mode) and yurt-tunnel-agent as
// real processes, and a stand-in kubelet (HTTPS, client certificate required)
// that only the agent's side reaches. Then talks to the kubelet through the
// server's CONNECT socket, as kube-apiserver's egress would, and shows what
// failures look like. `npm run demo -- --keep-running` leaves it all up.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { issueCertificate } from '../pkg/certs/pki.js';
import { dialThroughProxier, ProxierError } from '../pkg/interceptor/proxier-dialer.js';
import { StandinKubelet } from '../test/support/standin-kubelet/index.js';

const keepRunning = process.argv.includes('--keep-running');
const root = new URL('../..', import.meta.url).pathname;
const SERVER = join(root, 'dist/cmd/yurt-tunnel-server/main.js');
const AGENT = join(root, 'dist/cmd/yurt-tunnel-agent/main.js');

const children: ChildProcess[] = [];

function say(text: string): void {
  process.stdout.write(text + '\n');
}

async function freePort(): Promise<number> {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** Starts a CLI; resolves when a line matches `ready`. Its log goes to `logFile`-like buffer shown on failure. */
function startCLI(name: string, bin: string, args: string[], ready: RegExp): Promise<ChildProcess> {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const onText = (b: Buffer): void => {
      output += b.toString();
      if (ready.test(output)) resolve(child);
    };
    child.stdout!.on('data', onText);
    child.stderr!.on('data', onText);
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code}:\n${output}`)));
    setTimeout(() => reject(new Error(`${name} did not get ready in 15 s:\n${output}`)), 15_000).unref();
  });
}

function run(bin: string, args: string[]): Promise<void> {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'ignore', 'inherit'] });
  return once(child, 'exit').then(([code]) => {
    if (code !== 0) throw new Error(`${bin} ${args.join(' ')} exited with ${code}`);
  });
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
  const dir = mkdtempSync(join(tmpdir(), 'yurt-tunnel-demo-'));
  const pki = join(dir, 'pki');
  const uds = join(dir, 'proxier.sock');
  const agentPort = await freePort();

  say(`yurt-tunnel demo (work dir ${dir})\n`);
  say('1. yurt-tunnel-server in local certificate mode: makes its CA, listens for agents, opens the CONNECT socket');
  await startCLI(
    'yurt-tunnel-server',
    SERVER,
    ['--cert-dir', pki, '--bind-address', '127.0.0.1', '--tunnel-agent-connect-port', String(agentPort), '--interceptor-proxier-uds', uds],
    /yurt-tunnel-server started/,
  );
  say(`   agents: 127.0.0.1:${agentPort} (gRPC, mutual TLS)   proxier: ${uds}`);

  say('2. a client certificate for the agent of node "edge-1", issued by the server\'s CA');
  await run(SERVER, ['issue-agent-cert', '--cert-dir', pki, '--node-name', 'edge-1', '--out', join(dir, 'agent')]);

  const ca = { cert: readFileSync(join(pki, 'ca.crt'), 'utf8'), key: readFileSync(join(pki, 'ca.key'), 'utf8') };
  const kubeletCert = issueCertificate(ca, { commonName: 'edge-1', ips: ['127.0.0.1'], usages: ['serverAuth'] });
  const kubelet = new StandinKubelet({ cert: kubeletCert.cert, key: kubeletCert.key, clientCA: ca.cert, nodeName: 'edge-1' });
  await kubelet.start();
  const kubeletAddress = `127.0.0.1:${kubelet.port}`;
  say(`3. a stand-in kubelet for edge-1 on https://${kubeletAddress} (client certificate required)`);

  say('4. yurt-tunnel-agent for edge-1 dials out to the server and waits for work');
  await startCLI(
    'yurt-tunnel-agent',
    AGENT,
    [
      '--node-name', 'edge-1', '--node-ip', '127.0.0.1', '--tunnelserver-addr', `127.0.0.1:${agentPort}`,
      '--ca-file', join(dir, 'agent/ca.crt'), '--cert-file', join(dir, 'agent/tls.crt'), '--key-file', join(dir, 'agent/tls.key'),
    ],
    /connected to tunnel server/,
  );

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
  for (const c of children.reverse()) {
    c.kill('SIGTERM');
    if (c.exitCode === null) await once(c, 'exit');
  }
  await kubelet.close();
  rmSync(dir, { recursive: true, force: true });
  say('done');
}

process.on('exit', () => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL')));
main().catch((err: unknown) => {
  process.stderr.write(`demo failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}\n`);
  process.exit(1);
});
