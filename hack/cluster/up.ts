// `npm run cluster -- up`: networks, PKI, one mount-namespace holder per
// node, the control plane in the cloud node, then each node's containerd
// (with the busybox and our images imported), kubelet and kube-proxy, until
// every Node is Ready. Every step is recorded in state.json first, so that
// `down` undoes a half-made cluster as well as a whole one.
//
// With a route, our manifests are then deployed on it (deploy.ts).

import { existsSync, mkdirSync } from 'node:fs';
import { run, type RunOptions } from '../image.js';
import { findClusterBinaries } from './binaries.js';
import { writeControlPlanePKI } from './certs.js';
import { startControlPlane } from './control-plane.js';
import { deploy, type Route } from './deploy.js';
import { busyboxArchive, imageBaseName, importImage, LOCAL_IMAGE, ourImageArchive } from './images.js';
import { writeKubectlWrapper } from './kubectl.js';
import { makeNetworks } from './network.js';
import { prepareNode, startNode, waitNodesReady } from './nodes.js';
import { clusterSkipReason } from './requirements.js';
import { emptyState, LOG_DIR, readState, STATE_DIR, STATE_FILE, writeState } from './state.js';
import { ALL_NETNS, CLOUD, NODES } from './topology.js';

export interface UpOptions {
  /** Deploy our manifests on this route once every node is Ready; none: the bare cluster. */
  route?: Route;
  /** The manifests folder deployed (default: this repository's). */
  manifests?: string;
  /** Progress lines (one per step, with its time). */
  progress?: (line: string) => void;
  /** Where the commands' output goes (image build, ...); kept and shown only on failure by default. */
  echo?: RunOptions['echo'];
}

export class AlreadyUpError extends Error {
  override name = 'AlreadyUpError';
  readonly code = 'YT_ERR_CLUSTER_UP';
}

export async function up(opts: UpOptions = {}): Promise<void> {
  const progress = opts.progress ?? (() => undefined);
  const skip = clusterSkipReason();
  if (skip !== undefined) throw new Error(`cannot start the cluster: ${skip}`);
  const bins = findClusterBinaries();
  if ('missing' in bins) throw new Error(bins.missing);
  if (readState() !== undefined || existsSync(STATE_FILE)) {
    throw new AlreadyUpError(`the cluster is already up (${STATE_FILE}); run \`npm run cluster -- down\` first`);
  }
  const leftover = (await run('ip', ['netns', 'list']))
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => ALL_NETNS.includes(n));
  if (leftover.length > 0)
    throw new AlreadyUpError(`network namespaces ${leftover.join(', ')} exist without ${STATE_FILE}; run \`npm run cluster -- down\` first`);

  const started = Date.now();
  const step = async <T>(what: string, fn: () => Promise<T> | T): Promise<T> => {
    const t0 = Date.now();
    const value = await fn();
    progress(`${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return value;
  };
  mkdirSync(LOG_DIR, { recursive: true });
  const state = emptyState();
  writeState(state);

  // Our image builds while the cluster starts (a minute when the sources changed, nothing when cached).
  const ours = ourImageArchive({ echo: opts.echo });
  ours.catch(() => undefined);
  const busybox = await step('busybox image', () => busyboxArchive({ echo: opts.echo }));
  await step('networks and NAT routers', () => makeNetworks(state));
  await step('PKI', () => {
    writeControlPlanePKI();
    writeKubectlWrapper();
  });
  const nodes = await step('node mount namespaces and credentials', async () => {
    const made = [];
    for (const spec of NODES) made.push(await prepareNode(state, spec));
    return made;
  });
  const cloud = nodes[0]!;
  await step('control plane', () => startControlPlane(state, cloud, bins));
  await step('containerd, kubelet and kube-proxy on every node', () => Promise.all(NODES.map((spec, i) => startNode(state, nodes[i]!, spec, bins, busybox))));
  const archive = await step(`our image ${LOCAL_IMAGE}`, () => ours);
  await step('our image imported on every node', () => Promise.all(nodes.map((n) => importImage(n, archive, imageBaseName(LOCAL_IMAGE)))));
  await step('every node Ready', () => waitNodesReady(NODES, 180_000));
  const route = opts.route;
  if (route !== undefined)
    await step(`our manifests deployed on the ${route} route, server and agents Ready`, () =>
      deploy(state, route, bins, { manifests: opts.manifests, progress }),
    );
  progress(`up in ${((Date.now() - started) / 1000).toFixed(1)} s (${STATE_DIR}; cloud namespace ${CLOUD.netns})`);
}
