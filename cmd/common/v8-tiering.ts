// Imported first by both CLIs: V8 optimises the tunnel's hot functions
// sooner. Each function has an "interrupt budget" of bytecode it may run
// before V8 considers optimising it; with the default (66 KiB) a fresh
// process took ~3,000 new connections (CONNECT, echo, close) to reach its
// steady CPU per connection, and its first thousand cost 2–3× that
// (bench/README.md, "Connection cost"). A sixteenth of the default makes the
// start-up rehearsal's round trips hot enough to optimise even the small
// per-packet functions before the first caller's come, and has the
// once-per-connection path optimised sooner than a quarter did: new-connection
// p50 −11 %, p99 −28 % (bench/README.md, "The new-connection tail (p99)").
// Konnectivity's Go binaries start compiled; this is our nearest thing. A
// budget given on the node command line wins.

import { setFlagsFromString } from 'node:v8';

/** A sixteenth of V8 11's default (67,584 bytes). */
export const INTERRUPT_BUDGET = 4_224;

function budgetOnCommandLine(execArgv: readonly string[]): boolean {
  return execArgv.some((a) => a.startsWith('--interrupt-budget') || a.startsWith('--interrupt_budget'));
}

/** Sets the budget unless `execArgv` names one; returns the flag set, or undefined. */
export function applyTieringFlags(execArgv: readonly string[] = process.execArgv): string | undefined {
  if (budgetOnCommandLine(execArgv)) return undefined;
  const flag = `--interrupt-budget=${INTERRUPT_BUDGET}`;
  setFlagsFromString(flag);
  return flag;
}

applyTieringFlags();
