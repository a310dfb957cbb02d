// The reference peers for the bench: the real Konnectivity v0.30 Go server and
// agent (shared/konnectivity/, or KONNECTIVITY_BIN_DIR), run on the same
// machine, target and client as ours, so that every figure stands beside the
// one it is compared with. Both use our local CA's certificates.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { freeLowPort, goAgentArgs, goServerArgs, type KonnectivityBinaries } from '../hack/konnectivity.js';
import { writeAgentCertificate } from '../pkg/certs/local-store.js';

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

async function goAgent(children: ChildProcess[], bins: KonnectivityBinaries, certDir: string, dir: string, serverPort: number, agentID: string): Promise<void> {
  await writeAgentCertificate({ certDir, nodeName: agentID, nodeIPs: ['127.0.0.1'], outDir: join(dir, agentID) });
  const args = goAgentArgs(join(dir, agentID), serverPort, agentID, `host=${agentID}&ipv4=127.0.0.1`, await freeLowPort(), await freeLowPort());
  await start(children, bins.proxyAgent, args, /"Start serving"/);
}

/** The Go server (HTTP CONNECT on a Unix socket in `dir`) with one Go agent; resolves with the socket path. */
export async function startGoPair(children: ChildProcess[], bins: KonnectivityBinaries, certDir: string, dir: string): Promise<string> {
  const udsPath = join(dir, 'konnectivity.sock');
  const ports = { agentPort: await freeLowPort(), healthPort: await freeLowPort(), adminPort: await freeLowPort() };
  await start(children, bins.proxyServer, goServerArgs(certDir, udsPath, ports), /Starting agent server for tunnel connections/);
  const agentPort = ports.agentPort;
  await goAgent(children, bins, certDir, dir, agentPort, 'go-pair');
  return udsPath;
}

/** A Go agent joining our server at `agentPort`, reached with X-Tunnel-Proxy-Host `go-agent`. */
export async function startGoAgentOnOurs(children: ChildProcess[], bins: KonnectivityBinaries, certDir: string, dir: string, agentPort: number): Promise<string> {
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
