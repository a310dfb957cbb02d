// Imported first by both CLIs: V8 optimises the tunnel's hot functions
// sooner. Each function has an "interrupt budget" of bytecode it may run
// before V8 considers optimising it; with the default (66 KiB) a fresh
// process took ~3,000 new connections (CONNECT, echo, close) to reach its
// steady CPU per connection, and its first thousand cost 2–3× that
// (bench/README.md, "Connection cost"). A quarter of the default reaches it
// within ~1,000 connections for a little more compiling in the first few
// hundred. Konnectivity's Go binaries start compiled; this is our nearest thing.
// A budget given on the node command line wins.

import { setFlagsFromString } from 'node:v8';

/** A quarter of V8 11's default (67,584 bytes). */
export const INTERRUPT_BUDGET = 16_896;

/**
 * While the start-up rehearsal runs (pkg/grpc/data-path-rehearsal.ts): a quarter of
 * that again, so that its few hundred round trips make the small per-packet
 * functions hot enough to be optimised before the first caller's come.
 */
export const REHEARSAL_INTERRUPT_BUDGET = 4_224;

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

/**
 * The rehearsal's budget and, after it, the process's again (the
 * pkg/grpc/data-path-rehearsal.ts RehearsalTiering); undefined, changing nothing, when
 * the command line names a budget.
 */
export function rehearsalTiering(execArgv: readonly string[] = process.execArgv): { begin(): void; end(): void } | undefined {
  if (budgetOnCommandLine(execArgv)) return undefined;
  return {
    begin: () => setFlagsFromString(`--interrupt-budget=${REHEARSAL_INTERRUPT_BUDGET}`),
    end: () => setFlagsFromString(`--interrupt-budget=${INTERRUPT_BUDGET}`),
  };
}

applyTieringFlags();
