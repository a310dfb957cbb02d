// The iptables manager as a child process, for tests that run it inside a
// network namespace (ip netns exec): real Node and ConfigMap informers on a
// real API server, the real manager, reports over Node's IPC channel.
//
//   iptables-child.js <json options>
//   → {type: 'started'} | {type: 'start-failed', code, message}, then {type: 'sync', ...} after each sync
//   ← {type: 'sync-now', full} | {type: 'stop'}  (→ {type: 'stopped'}, then it exits)

import { createKubeClient } from '../../pkg/kube/client.js';
import { nodeInformer } from '../../pkg/kube/node-resolver.js';
import { ServerConfigSource } from '../../pkg/kube/server-config-source.js';
import { CommandRunner } from '../../pkg/iptables/exec.js';
import { IptablesManager } from '../../pkg/iptables/manager.js';
import type { MasterAddresses } from '../../pkg/iptables/targets.js';
import { createLogger } from '../../pkg/log/logger.js';
import { IptablesError } from '../../pkg/iptables/errors.js';

export interface IptablesChildOptions {
  kubeconfig: string;
  master: MasterAddresses;
  syncPeriodMs: number;
  /** The PATH its commands are looked up in; default the process's. */
  path?: string;
}

export type IptablesChildMessage =
  | { type: 'started' }
  | { type: 'start-failed'; code: string; message: string }
  | { type: 'sync'; full: boolean; restored: number[]; conntrackDeletions: number; cloudNodes: number; restores: number }
  | { type: 'stopped' };

export type IptablesChildCommand = { type: 'sync-now'; full: boolean } | { type: 'stop' };

function send(message: IptablesChildMessage): void {
  process.send!(message);
}

const opts = JSON.parse(process.argv[2]!) as IptablesChildOptions;
const logger = createLogger({ verbosity: 2 });
const client = createKubeClient({ kind: 'kubeconfig', path: opts.kubeconfig });
const nodes = nodeInformer(client, logger);
const config = new ServerConfigSource(client, { insecurePort: opts.master.insecure.port, localhostProxyPorts: [], logger });
const manager = new IptablesManager({
  nodes,
  config,
  master: opts.master,
  syncPeriodMs: opts.syncPeriodMs,
  runner: new CommandRunner(opts.path === undefined ? {} : { path: opts.path }),
  logger,
});
manager.onSync((r) =>
  send({
    type: 'sync',
    full: r.full,
    restored: r.restored,
    conntrackDeletions: r.conntrackDeletions,
    cloudNodes: r.targets.cloudNodes,
    restores: manager.restores,
  }),
);

async function stop(): Promise<void> {
  await manager.stop();
  await Promise.all([nodes.stop(), config.stop()]);
  send({ type: 'stopped' });
  process.disconnect();
}

process.on('message', (command: IptablesChildCommand) => {
  if (command.type === 'sync-now') manager.requestSync(command.full);
  else void stop();
});

nodes.start();
config.start();
try {
  await manager.start();
  send({ type: 'started' });
} catch (err: unknown) {
  if (!(err instanceof IptablesError)) throw err;
  send({ type: 'start-failed', code: err.code, message: err.message });
  await Promise.all([nodes.stop(), config.stop()]);
  process.disconnect();
}
