// What V8 is told around the start-up rehearsal (--startup-rehearsal,
// pkg/grpc/data-path-rehearsal.ts): while it runs, V8 optimises a function
// after a sixteenth of its default "interrupt budget" (the bytecode a function
// may run before V8 considers optimising it), so that the rehearsal's few
// hundred round trips make the small per-packet functions hot enough to be
// optimised before the first caller's come; after it, V8's default again.
//
// The CLIs no longer lower the budget for the whole process (to a quarter).
// Re-measured (npm run bench -- warm-curve --batches 4, 4 runs each,
// alternated, load 16-20): server+agent CPU ms per connection, batches of 500
// from a fresh start, medians: with it 3.46, 1.04, 0.73, 0.62; without 2.28,
// 1.79, 1.71, 0.93. It moved the cost rather than saving it: the first 500
// connections cost ~50 % more, the next 1,500 ~45 % less, the four batches
// together 4.7-6.8 against 5.6-7.5 (overlapping); compare --quick showed no
// figure beyond noise. So V8's own default it is.
// A budget given on the node command line wins.

import { setFlagsFromString } from 'node:v8';

/** V8 11's default (Node 20): what the process runs with after the rehearsal. */
export const DEFAULT_INTERRUPT_BUDGET = 67_584;

/** During the rehearsal: a sixteenth of the default. */
export const REHEARSAL_INTERRUPT_BUDGET = 4_224;

function budgetOnCommandLine(execArgv: readonly string[]): boolean {
  return execArgv.some((a) => a.startsWith('--interrupt-budget') || a.startsWith('--interrupt_budget'));
}

/**
 * The rehearsal's budget and, after it, V8's default again (the
 * pkg/grpc/data-path-rehearsal.ts RehearsalTiering); undefined, changing nothing,
 * when the command line names a budget.
 */
export function rehearsalTiering(execArgv: readonly string[] = process.execArgv): { begin(): void; end(): void } | undefined {
  if (budgetOnCommandLine(execArgv)) return undefined;
  return {
    begin: () => setFlagsFromString(`--interrupt-budget=${REHEARSAL_INTERRUPT_BUDGET}`),
    end: () => setFlagsFromString(`--interrupt-budget=${DEFAULT_INTERRUPT_BUDGET}`),
  };
}
