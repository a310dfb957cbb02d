// The agent's search for the tunnel server: read x-tunnel-server-svc (and,
// for a NodePort Service, the cloud nodes) until it yields an address an edge
// node can dial. Until then every change of what is wrong is logged, with
// what to set, and the search goes on with backoff.

import type { ConfigurationOptions, V1Node, V1Service } from '@kubernetes/client-node';
import { Backoff } from '../timers/backoff.js';
import { sleep } from '../timers/sleep.js';
import type { Logger } from '../log/logger.js';
import { describeSource, type KubeClient } from './client.js';
import { apiErrorMessage, apiStatusCode, isNotFound } from './errors.js';
import { abortable, requestDeadline } from './request-options.js';
import { CLOUD_NODE_SELECTOR, tunnelServerAddress, type ServerAddressResult } from './tunnel-server-address.js';
import { TUNNEL_NAMESPACE, TUNNEL_SERVICE } from './tunnel-addresses.js';

export interface DiscoveryOptions {
  client: KubeClient;
  signal: AbortSignal;
  logger: Logger;
  /** First retry delay (doubling, up to capMs). Default 1 s. */
  retryMs?: number;
  capMs?: number;
  /** Called with each problem as it changes (e.g. for a readiness message). */
  onProblem?(problem: string): void;
}

const REQUEST_TIMEOUT_MS = 15_000;

async function readOnce(client: KubeClient, signal: AbortSignal): Promise<ServerAddressResult> {
  const deadline = requestDeadline(signal, REQUEST_TIMEOUT_MS);
  try {
    return await readService(client, abortable(deadline.signal));
  } finally {
    deadline.dispose();
  }
}

async function readService(client: KubeClient, options: ConfigurationOptions): Promise<ServerAddressResult> {
  const forbidden = (what: string, err: unknown): ServerAddressResult => ({
    problem:
      `the agent's identity (${describeSource(client.source)}) may not ${what} (${apiErrorMessage(err)}): ` +
      "use the node's kubelet kubeconfig (--kube-config=/etc/kubernetes/kubelet.conf, as the manifests do: " +
      'the Node authorizer lets every node get Services and list Nodes), grant that identity the read, ' +
      'or start the agent with --tunnelserver-addr=<host>:<port>',
  });
  let svc: V1Service | undefined;
  try {
    svc = await client.core.readNamespacedService({ namespace: TUNNEL_NAMESPACE, name: TUNNEL_SERVICE }, options);
  } catch (err: unknown) {
    if (isNotFound(err)) svc = undefined;
    else if (apiStatusCode(err) === 403) return forbidden(`get Service ${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE}`, err);
    else throw err;
  }
  let cloudNodes: V1Node[] = [];
  if (svc?.spec?.type === 'NodePort') {
    try {
      cloudNodes = (await client.core.listNode({ labelSelector: CLOUD_NODE_SELECTOR }, options)).items;
    } catch (err: unknown) {
      if (apiStatusCode(err) === 403) return forbidden('list nodes (to reach the NodePort Service on a cloud node)', err);
      throw err;
    }
  }
  return tunnelServerAddress(svc, cloudNodes);
}

/** Resolves with the first usable address; rejects only when `signal` aborts. */
export async function discoverTunnelServer(opts: DiscoveryOptions): Promise<string> {
  const log = opts.logger.child({ service: `${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE}`, apiServer: opts.client.server });
  const backoff = new Backoff({ initialMs: opts.retryMs ?? 1000, factor: 2, jitter: 0.1, capMs: opts.capMs ?? 30_000 });
  let reported = '';
  let repeats = 0;
  for (;;) {
    opts.signal.throwIfAborted();
    let result: ServerAddressResult;
    try {
      result = await readOnce(opts.client, opts.signal);
    } catch (err: unknown) {
      opts.signal.throwIfAborted();
      result = { problem: `cannot read Service ${TUNNEL_NAMESPACE}/${TUNNEL_SERVICE} from ${opts.client.server}: ${apiErrorMessage(err)}` };
    }
    if ('address' in result) {
      log.info('tunnel server address found', { address: result.address, from: result.from });
      return result.address;
    }
    const delay = backoff.next();
    repeats = result.problem === reported ? repeats + 1 : 0;
    if (repeats === 0) opts.onProblem?.(result.problem);
    // A new problem is logged at once; the same one again every tenth try, so a long wait does not flood the log.
    if (repeats % 10 === 0) log.warn(`no tunnel server address yet: ${result.problem}`, { retryInMs: Math.round(delay) });
    reported = result.problem;
    if (!(await sleep(delay, opts.signal))) opts.signal.throwIfAborted();
  }
}
