// npm run cluster -- up | down | status: a local Kubernetes cluster of real
// kubelets in network namespaces, two edge nodes behind NAT routers, with our
// image imported on every node (hack/cluster/up.ts says what `up` makes).

import { down } from './cluster/down.js';
import { statusText } from './cluster/status.js';
import { AlreadyUpError, up } from './cluster/up.js';

const USAGE = 'usage: npm run cluster -- up | down | status';

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  const log = (line: string): void => void process.stderr.write(`${line}\n`);
  if (args.length !== 1) {
    log(USAGE);
    return 2;
  }
  switch (args[0]) {
    case 'up':
      try {
        await up({ progress: log });
      } catch (err: unknown) {
        log(`up failed: ${(err as Error).message}`);
        if (!(err instanceof AlreadyUpError)) log('what was made stays for a look (npm run cluster -- status); `npm run cluster -- down` removes it');
        return 1;
      }
      process.stdout.write((await statusText()).text);
      return 0;
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
