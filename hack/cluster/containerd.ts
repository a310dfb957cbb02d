// A node's containerd: Debian's defaults with its state in the node's private
// /var/lib/containerd and /run/containerd, our CNI configuration (a bridge on
// the node's pod subnet) and the busybox sandbox image. restrict_oom_score_adj:
// these machines do not grant CAP_SYS_RESOURCE, and runc cannot set the -998
// the kubelet asks for the sandbox without it (../shared/envtest/README.md).

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { run } from '../image.js';
import { privatePath, runInNode, startInNode } from './holder.js';
import { PAUSE_IMAGE } from './images.js';
import { nodeDir, type ClusterState, type NodeState } from './state.js';
import type { NodeSpec } from './topology.js';

export const CNI_BIN_DIR = '/usr/lib/cni';

function set(text: string, key: string, value: string): string {
  const re = new RegExp(`^(\\s*${key} = ).*$`, 'm');
  if (!re.test(text)) throw new Error(`containerd's default configuration has no ${key}`);
  return text.replace(re, `$1${value}`);
}

export async function writeContainerdConfig(spec: NodeSpec): Promise<string> {
  let config = await run('containerd', ['config', 'default']);
  // The "opt" plugin would make /opt/containerd in the root file system.
  config = set(config, 'disabled_plugins', '["io.containerd.internal.v1.opt"]');
  config = set(config, 'restrict_oom_score_adj', 'true');
  config = set(config, 'sandbox_image', JSON.stringify(PAUSE_IMAGE));
  config = set(config, 'bin_dir', JSON.stringify(CNI_BIN_DIR));
  const path = join(nodeDir(spec.name), 'containerd.toml');
  writeFileSync(path, config);
  const conflist = {
    cniVersion: '0.4.0',
    name: 'ytc',
    plugins: [
      {
        type: 'bridge',
        bridge: 'cni0',
        isGateway: true,
        ipMasq: true,
        hairpinMode: true,
        ipam: { type: 'host-local', ranges: [[{ subnet: spec.podCIDR }]], routes: [{ dst: '0.0.0.0/0' }] },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  writeFileSync(join(privatePath(spec.name, '/etc/cni/net.d'), '10-ytc.conflist'), JSON.stringify(conflist, null, 2));
  return path;
}

export async function startContainerd(state: ClusterState, node: NodeState, config: string): Promise<void> {
  const proc = startInNode(state, node, 'containerd', 'containerd', ['--config', config]);
  const deadline = Date.now() + 30_000;
  let last = '';
  for (;;) {
    try {
      await runInNode(node, 'ctr', ['version']);
      return;
    } catch (err: unknown) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) throw new Error(`containerd on node ${node.name} not answering after 30 s (log ${proc.log}): ${last}`);
    await sleep(200);
  }
}
