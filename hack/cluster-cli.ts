// npm run cluster -- up [--route egress-selector|iptables] | deploy --route ... |
// down | status (deploy --ha: a second cloud node and two server replicas): a local Kubernetes cluster of real kubelets in network
// namespaces, two edge nodes behind NAT routers, with our image imported on
// every node and, given a route, our manifests deployed on it (`deploy`
// switches a running cluster to another route). hack/cluster/up.ts says what
// `up` makes.

import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { findClusterBinaries } from './cluster/binaries.js';
import { deploy, isRoute, ROUTES, type Route } from './cluster/deploy.js';
import { down } from './cluster/down.js';
import { addSecondCloudNode } from './cluster/second-cloud-node.js';
import { readState } from './cluster/state.js';
import { CLOUD_2 } from './cluster/topology.js';
import { statusText } from './cluster/status.js';
import { AlreadyUpError, up } from './cluster/up.js';

const ROUTE = `--route ${ROUTES.join('|')} [--manifests DIR]`;
const USAGE = `usage: npm run cluster -- up [${ROUTE}] | deploy ${ROUTE} [--ha] | down | status`;

async function main(): Promise<number> {
  const log = (line: string): void => void process.stderr.write(`${line}\n`);
  let parsed;
  try {
    parsed = parseArgs({ allowPositionals: true, options: { route: { type: 'string' }, manifests: { type: 'string' }, ha: { type: 'boolean' } } });
  } catch (err: unknown) {
    log(`${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const { positionals, values } = parsed;
  const command = positionals[0];
  const takesRoute = command === 'up' || command === 'deploy';
  let route: Route | undefined;
  if (values.route !== undefined && takesRoute && isRoute(values.route)) route = values.route;
  const manifests = values.manifests === undefined ? undefined : resolve(values.manifests);
  if (
    positionals.length !== 1 ||
    (values.route !== undefined && route === undefined) ||
    (values.manifests !== undefined && route === undefined) ||
    (command === 'deploy' && route === undefined) ||
    (values.ha === true && command !== 'deploy')
  ) {
    log(USAGE);
    return 2;
  }
  switch (command) {
    case 'up':
      try {
        await up({ progress: log, route, manifests });
      } catch (err: unknown) {
        log(`up failed: ${(err as Error).message}`);
        if (!(err instanceof AlreadyUpError)) log('what was made stays for a look (npm run cluster -- status); `npm run cluster -- down` removes it');
        return 1;
      }
      process.stdout.write((await statusText()).text);
      return 0;
    case 'deploy': {
      const state = readState();
      const bins = findClusterBinaries();
      if (state === undefined) {
        log('the cluster is not up: `npm run cluster -- up` first');
        return 1;
      }
      if ('missing' in bins) {
        log(bins.missing);
        return 1;
      }
      if (route === undefined) return 2;
      const t0 = Date.now();
      try {
        if (values.ha === true) {
          await addSecondCloudNode(state, bins);
          log(`  node ${CLOUD_2.name} Ready`);
        }
        await deploy(state, route, bins, { manifests, progress: log, ha: values.ha === true });
      } catch (err: unknown) {
        log(`deploy failed: ${(err as Error).message}`);
        return 1;
      }
      log(`deployed on the ${route} route in ${((Date.now() - t0) / 1000).toFixed(1)} s: server and agents Ready`);
      return 0;
    }
    case 'down': {
      const t0 = Date.now();
      const result = await down(log);
      if (!result.wasUp) {
        log('nothing to take down');
        return 0;
      }
      if (result.left.length > 0) {
        log(`down left behind:\n  ${result.left.join('\n  ')}`);
        return 1;
      }
      log(`down in ${((Date.now() - t0) / 1000).toFixed(1)} s: checked, nothing left (no ytc- namespace, process, mount, cgroup or folder)`);
      return 0;
    }
    case 'status': {
      const s = await statusText();
      process.stdout.write(s.text);
      return s.up ? 0 : 3;
    }
    default:
      log(USAGE);
      return 2;
  }
}

process.exitCode = await main();
