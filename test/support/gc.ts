// A full garbage collection on demand, for tests that check what is still
// reachable or what a phase allocates (V8's gc() without --expose-gc on the
// test runner's command line).

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's gc(), made available to this process. */
export function exposedGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}
