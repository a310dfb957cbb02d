// The reference peers for the bench: the real Konnectivity v0.30 Go server and
// agent (shared/konnectivity/, or KONNECTIVITY_BIN_DIR), run on the same
// machine, target and client as ours, so that every figure stands beside the
// one it is compared with. Both use our local CA's certificates.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { accessSync, constants } from 'node:fs';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from '../hack/local-tunnel.js';
import { writeAgentCertificate } from '../pkg/certs/local-store.js';

export interface GoBinaries {
  proxyServer: string;
  proxyAgent: string;
}

/** The Go binaries, or a one-line reason why their rows are left out. */
export function findGoBinaries(): GoBinaries | string {
  const dir = process.env.KONNECTIVITY_BIN_DIR ?? resolve(REPO_ROOT, '../shared/konnectivity');
  const bins = { proxyServer: join(dir, 'proxy-server'), proxyAgent: join(dir, 'proxy-agent') };
  try {
    for (const b of Object.values(bins)) accessSync(b, constants.X_OK);
  } catch {
    return `no Konnectivity binaries in ${dir} (KONNECTIVITY_BIN_DIR)`;
  }
  return bins;
}

/** A free loopback port below 32768 (the Go server refuses agent ports above 32767). */
async function lowPort(): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    const s = createServer();
    const ok = await new Promise<boolean>((r) => {
      s.once('error', () => r(false));
      s.listen(port, '127.0.0.1', () => r(true));
    });
    if (ok) {
      await new Promise((r) => s.close(r));
      return port;
    }
  }
  throw new Error('no free port below 32768');
}

function start(children: ChildProcess[], bin: string, args: string[], ready: RegExp): Promise<void> {
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  return new Promise((resolveReady, reject) => {
    const onText = (b: Buffer): void => {
      out += b.toString();
      if (ready.test(out)) resolveReady();
    };
    child.stdout!.on('data', onText);
    child.stderr!.on('data', onText);
    child.once('exit', (code) => reject(new Error(`${bin} exited with ${code}:\n${out.slice(-2000)}`)));
    setTimeout(() => reject(new Error(`${bin} not ready in 20 s:\n${out.slice(-2000)}`)), 20_000).unref();
  });
}

async function goAgent(children: ChildProcess[], bins: GoBinaries, certDir: string, dir: string, serverPort: number, agentID: string): Promise<void> {
  const files = await writeAgentCertificate({ certDir, nodeName: agentID, nodeIPs: ['127.0.0.1'], outDir: join(dir, agentID) });
  await start(
    children,
    bins.proxyAgent,
    [
      '--proxy-server-host=127.0.0.1', `--proxy-server-port=${serverPort}`,
      `--ca-cert=${files.caFile}`, `--agent-cert=${files.certFile}`, `--agent-key=${files.keyFile}`,
      `--agent-id=${agentID}`, `--agent-identifiers=host=${agentID}&ipv4=127.0.0.1`,
      '--health-server-host=127.0.0.1', `--health-server-port=${await lowPort()}`, `--admin-server-port=${await lowPort()}`,
    ],
    /"Start serving"/,
  );
}

/** The Go server (HTTP CONNECT on a Unix socket in `dir`) with one Go agent; resolves with the socket path. */
export async function startGoPair(children: ChildProcess[], bins: GoBinaries, certDir: string, dir: string): Promise<string> {
  const udsPath = join(dir, 'konnectivity.sock');
  const agentPort = await lowPort();
  await start(
    children,
    bins.proxyServer,
    [
      '--mode=http-connect', `--uds-name=${udsPath}`, '--server-port=0',
      '--agent-bind-address=127.0.0.1', `--agent-port=${agentPort}`,
      '--health-bind-address=127.0.0.1', `--health-port=${await lowPort()}`, `--admin-port=${await lowPort()}`,
      `--cluster-cert=${join(certDir, 'tunnel-server.crt')}`, `--cluster-key=${join(certDir, 'tunnel-server.key')}`,
      `--cluster-ca-cert=${join(certDir, 'ca.crt')}`,
    ],
    /Starting agent server for tunnel connections/,
  );
  await goAgent(children, bins, certDir, dir, agentPort, 'go-pair');
  return udsPath;
}

/** A Go agent joining our server at `agentPort`, reached with X-Tunnel-Proxy-Host `go-agent`. */
export async function startGoAgentOnOurs(children: ChildProcess[], bins: GoBinaries, certDir: string, dir: string, agentPort: number): Promise<string> {
  await goAgent(children, bins, certDir, dir, agentPort, 'go-agent');
  return 'go-agent';
}

/** Ends the Go processes. */
export async function stopAll(children: ChildProcess[]): Promise<void> {
  for (const c of children) {
    if (c.exitCode !== null || c.signalCode !== null) continue;
    c.kill('SIGTERM');
    await once(c, 'exit');
  }
}
