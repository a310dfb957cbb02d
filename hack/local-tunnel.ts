// A local tunnel from the real CLIs, for the demo and the bench: a temp dir,
// yurt-tunnel-server in local certificate mode, an agent certificate from its
// CA, and yurt-tunnel-agent for one node. stop() ends them and removes the dir.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_NODE_OPTIONS } from '../pkg/agent/node-options.js';
import { SERVER_NODE_OPTIONS } from '../pkg/server/node-options.js';
import { AGENT_BIN, SERVER_BIN } from './cli-bins.js';
import { freeLowPort } from './ports.js';

export { AGENT_BIN, REPO_ROOT, SERVER_BIN } from './cli-bins.js';

/** Starts a node script; resolves once its output matches `ready` (with the match). */
export function startProcess(
  children: ChildProcess[],
  bin: string,
  args: string[],
  ready: RegExp,
  onOutput?: (text: string) => void,
  spawnOpts: { nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<{ child: ChildProcess; match: RegExpMatchArray }> {
  const child = spawn(process.execPath, [...(spawnOpts.nodeArgs ?? []), bin, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: spawnOpts.env === undefined ? process.env : { ...process.env, ...spawnOpts.env },
  });
  children.push(child);
  let out = '';
  let isReady = false;
  return new Promise((resolve, reject) => {
    const onText = (b: Buffer): void => {
      const text = b.toString();
      onOutput?.(text);
      // Once ready, what follows is only passed on (a long-running process may print a lot).
      if (isReady) return;
      out += text;
      const m = ready.exec(out);
      if (m) {
        isReady = true;
        resolve({ child, match: m });
      }
    };
    child.stdout.on('data', onText);
    child.stderr.on('data', onText);
    child.once('exit', (code) => reject(new Error(`${bin} exited with ${code}:\n${out}`)));
    setTimeout(() => reject(new Error(`${bin} did not get ready in 20 s:\n${out}`)), 20_000).unref();
  });
}

export interface LocalTunnel {
  dir: string;
  certDir: string;
  agentDir: string;
  udsPath: string;
  agentPort: number;
  /** The master ports (HTTPS and HTTP), on 127.0.0.1. */
  securePort: number;
  insecurePort: number;
  nodeName: string;
  children: ChildProcess[];
  /** Stops every process (agent first, gracefully) and removes the dir. */
  stop(): Promise<void>;
}

export interface LocalTunnelOptions {
  nodeName?: string;
  serverArgs?: string[];
  agentArgs?: string[];
  /** Node.js options for the agent process (before its script), e.g. --import of a probe or V8 flags; after AGENT_NODE_OPTIONS, so a V8 flag given here wins. */
  agentNodeArgs?: string[];
  /** Extra environment for the agent process. */
  agentEnv?: NodeJS.ProcessEnv;
  /** Node.js options for the server process, as agentNodeArgs (after SERVER_NODE_OPTIONS). */
  serverNodeArgs?: string[];
  /** Extra environment for the server process. */
  serverEnv?: NodeJS.ProcessEnv;
  /** Sees every line the server and agent print (e.g. to echo them). */
  onOutput?: (who: 'server' | 'agent', text: string) => void;
  /** Called between the steps, for narration. */
  onStep?: (step: 'server' | 'agent-cert' | 'agent', detail: string) => void;
  /** An existing --cert-dir (a local CA) to use instead of a new one; it is left in place on stop. */
  certDir?: string;
  /** An existing agent certificate folder (ca.crt, tls.crt, tls.key) from that CA, instead of issuing one. */
  agentDir?: string;
  /** Start our agent. Default true; false starts the server alone (for another agent to join). */
  agent?: boolean;
  /** The port the agent dials, given the server's agent port: a relay in front of it (bench/slow-link.ts). Default the server's own. */
  agentDialPort?: (agentPort: number) => Promise<number>;
  /** The scripts to run instead of the bundles (bench/cold-start.ts runs tsc's modules to compare). */
  serverBin?: string;
  agentBin?: string;
}

/** Issues an agent certificate for `nodeName` (IPs `nodeIP`, a comma list) from the CA in `certDir`, with the real CLI; its error output says why not. */
export async function issueAgentCertificate(certDir: string, nodeName: string, outDir: string, nodeIP = '127.0.0.1'): Promise<void> {
  const issue = spawn(
    process.execPath,
    [SERVER_BIN, 'issue-agent-cert', '--cert-dir', certDir, '--node-name', nodeName, '--node-ip', nodeIP, '--out', outDir],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  issue.stderr.setEncoding('utf8').on('data', (text: string) => (stderr += text));
  const [code] = (await once(issue, 'close')) as [number];
  if (code !== 0) throw new Error(`issue-agent-cert for ${nodeName} exited with ${code}:\n${stderr}`);
}

/**
 * The server's command line in local mode on loopback: its own CA in `certDir`,
 * the agent port given (0: any), the CONNECT proxier on `udsPath`, and the
 * master and meta ports on free ports (their numbers are in the "started" line).
 */
export function localServerFlags(opts: { certDir: string; agentPort?: number; udsPath: string }): string[] {
  // prettier-ignore
  return [
    '--cert-dir', opts.certDir,
    '--bind-address', '127.0.0.1',
    '--tunnel-agent-connect-port', String(opts.agentPort ?? 0),
    '--interceptor-proxier-uds', opts.udsPath,
    '--secure-port', '0',
    '--insecure-port', '0',
    '--meta-port', '0',
  ];
}

/** The agent's command line in local mode on loopback, with the certificate files `issue-agent-cert` wrote to `agentDir`. */
export function localAgentFlags(opts: { nodeName: string; nodeIP?: string; serverPort: number; agentDir: string }): string[] {
  // prettier-ignore
  return [
    '--node-name', opts.nodeName,
    '--node-ip', opts.nodeIP ?? '127.0.0.1',
    '--tunnelserver-addr', `127.0.0.1:${opts.serverPort}`,
    '--meta-port', '0',
    '--ca-file', join(opts.agentDir, 'ca.crt'),
    '--cert-file', join(opts.agentDir, 'tls.crt'),
    '--key-file', join(opts.agentDir, 'tls.key'),
  ];
}

export async function startLocalTunnel(opts: LocalTunnelOptions = {}): Promise<LocalTunnel> {
  const nodeName = opts.nodeName ?? 'edge-1';
  const dir = mkdtempSync(join(tmpdir(), 'yurt-tunnel-'));
  const certDir = opts.certDir ?? join(dir, 'pki');
  const agentDir = opts.agentDir ?? join(dir, 'agent');
  const udsPath = join(dir, 'proxier.sock');
  const agentPort = await freeLowPort();
  const children: ChildProcess[] = [];
  let securePort = 0;
  let insecurePort = 0;
  const killAll = (): void => children.forEach((c) => c.exitCode === null && c.kill('SIGKILL'));
  const stop = async (): Promise<void> => {
    process.off('exit', killAll);
    for (const c of [...children].reverse()) {
      if (c.exitCode !== null || c.signalCode !== null) continue;
      c.kill('SIGTERM');
      await once(c, 'exit');
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const started = await startProcess(
      children,
      opts.serverBin ?? SERVER_BIN,
      [...localServerFlags({ certDir, agentPort, udsPath }), ...(opts.serverArgs ?? [])],
      /yurt-tunnel-server started .*securePort=(\d+) insecurePort=(\d+)/,
      (t) => opts.onOutput?.('server', t),
      { nodeArgs: [...SERVER_NODE_OPTIONS, ...(opts.serverNodeArgs ?? [])], env: opts.serverEnv },
    );
    securePort = Number(started.match[1]);
    insecurePort = Number(started.match[2]);
    opts.onStep?.('server', `agents: 127.0.0.1:${agentPort} (gRPC, mutual TLS)   proxier: ${udsPath}`);
    if (opts.agent !== false) {
      if (opts.agentDir === undefined) await issueAgentCertificate(certDir, nodeName, agentDir);
      opts.onStep?.('agent-cert', join(agentDir, 'tls.crt'));
      await startProcess(
        children,
        opts.agentBin ?? AGENT_BIN,
        [...localAgentFlags({ nodeName, serverPort: (await opts.agentDialPort?.(agentPort)) ?? agentPort, agentDir }), ...(opts.agentArgs ?? [])],
        /connected to tunnel server/,
        (t) => opts.onOutput?.('agent', t),
        { nodeArgs: [...AGENT_NODE_OPTIONS, ...(opts.agentNodeArgs ?? [])], env: opts.agentEnv },
      );
      opts.onStep?.('agent', nodeName);
    }
  } catch (err: unknown) {
    await stop();
    throw err;
  }
  process.on('exit', killAll);
  return { dir, certDir, agentDir, udsPath, agentPort, securePort, insecurePort, nodeName, children, stop };
}
