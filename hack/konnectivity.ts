// The real Konnectivity Go binaries (shared/konnectivity/), for the interop
// tests and the bench: where they are (KONNECTIVITY_BIN_DIR overrides the
// folder, as envtest's KUBEBUILDER_ASSETS does for the control plane), a
// reason to skip when they are not, free ports they accept, their arguments.

import { accessSync, constants } from 'node:fs';
import { join, resolve } from 'node:path';
import { REPO_ROOT } from './local-tunnel.js';

export interface KonnectivityBinaries {
  proxyServer: string;
  proxyAgent: string;
}

export function konnectivityDir(): string {
  return process.env.KONNECTIVITY_BIN_DIR ?? resolve(REPO_ROOT, '../shared/konnectivity');
}

/** The binaries, or a one-line reason why the tests that need them skip. */
export function findKonnectivity(): KonnectivityBinaries | string {
  const dir = konnectivityDir();
  const bins = { proxyServer: join(dir, 'proxy-server'), proxyAgent: join(dir, 'proxy-agent') };
  const missing = Object.values(bins).filter((path) => {
    try {
      accessSync(path, constants.X_OK);
      return false;
    } catch {
      return true;
    }
  });
  // hack/run-tests.mjs accepts a skip only with a reason of this form.
  if (missing.length > 0) return `needs the Konnectivity Go binaries, not found here: ${missing.join(', ')} (set KONNECTIVITY_BIN_DIR to their folder)`;
  return bins;
}

export interface GoServerPorts {
  agentPort: number;
  healthPort: number;
  adminPort: number;
}

/** Arguments for the Go proxy-server in HTTP CONNECT mode on `udsPath`, with our local CA's files. */
export function goServerArgs(certDir: string, udsPath: string, ports: GoServerPorts): string[] {
  return [
    '--mode=http-connect',
    `--uds-name=${udsPath}`,
    '--server-port=0',
    '--agent-bind-address=127.0.0.1',
    `--agent-port=${ports.agentPort}`,
    '--health-bind-address=127.0.0.1',
    `--health-port=${ports.healthPort}`,
    `--admin-port=${ports.adminPort}`,
    `--cluster-cert=${join(certDir, 'tunnel-server.crt')}`,
    `--cluster-key=${join(certDir, 'tunnel-server.key')}`,
    `--cluster-ca-cert=${join(certDir, 'ca.crt')}`,
    '--server-count=1',
    '--proxy-strategies=destHost,default',
  ];
}

/** Arguments for the Go proxy-agent against `serverPort`, with an agent's ca.crt/tls.crt/tls.key in `agentDir`. */
export function goAgentArgs(
  agentDir: string,
  serverPort: number,
  agentID: string,
  identifiers: string,
  healthPort: number,
  adminPort: number,
  extra: string[] = [],
): string[] {
  return [
    '--proxy-server-host=127.0.0.1',
    `--proxy-server-port=${serverPort}`,
    `--ca-cert=${join(agentDir, 'ca.crt')}`,
    `--agent-cert=${join(agentDir, 'tls.crt')}`,
    `--agent-key=${join(agentDir, 'tls.key')}`,
    `--agent-id=${agentID}`,
    `--agent-identifiers=${identifiers}`,
    '--health-server-host=127.0.0.1',
    `--health-server-port=${healthPort}`,
    `--admin-server-port=${adminPort}`,
    '--sync-interval=200ms',
    '--sync-interval-cap=1s',
    ...extra,
  ];
}
