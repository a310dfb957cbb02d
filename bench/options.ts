// What a scenario is to the bench command (bench/main.ts), and the checks
// that turn parseArgs' strings into its typed options. A wrong value is a
// UsageError: the command prints it with the usage and exits 2.

import type { ParseArgsConfig } from 'node:util';

export type OptionSpecs = NonNullable<ParseArgsConfig['options']>;
export type OptionValues = Record<string, string | boolean | Array<string | boolean> | undefined>;

export interface Scenario {
  name: string;
  /** One line for the usage text. */
  summary: string;
  /** The scenario's options as the usage shows them, e.g. '[--rounds N] [--only PAIRS]'. */
  usage: string;
  /** Its options for node:util parseArgs (the command adds --json and --help). */
  options: OptionSpecs;
  /** Whether it takes positional arguments (named in `usage`). */
  positionals?: boolean;
  /** Whether the process must run with node --expose-gc (the npm script does). */
  needsGc?: boolean;
  /** Checks the options (a UsageError if wrong) and returns the run, which resolves to the figures for --json. */
  prepare(values: OptionValues, positionals: string[]): () => Promise<unknown>;
}

export class UsageError extends Error {
  override name = 'UsageError';
}

/** A string option's value, or undefined when not given. */
export function text(values: OptionValues, name: string): string | undefined {
  const v = values[name];
  return typeof v === 'string' ? v : undefined;
}

export function flag(values: OptionValues, name: string): boolean {
  return values[name] === true;
}

/** A number option in [min, max], `dflt` when not given. */
export function num(values: OptionValues, name: string, dflt: number, min: number, max: number): number {
  const v = text(values, name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n < min || n > max) throw new UsageError(`--${name} takes a number from ${min} to ${max}, not ${v}`);
  return n;
}

/** A comma-separated list of numbers, each in [min, max]. */
export function numList(values: OptionValues, name: string, dflt: number[], min: number, max: number): number[] {
  const v = text(values, name);
  if (v === undefined) return dflt;
  const list = v.split(',').map(Number);
  if (v.trim() === '' || list.some((n) => !Number.isFinite(n) || n < min || n > max)) {
    throw new UsageError(`--${name} takes numbers from ${min} to ${max}, comma-separated, not ${v}`);
  }
  return list;
}

/** A space-separated list, e.g. --node-args "--max-semi-space-size=4 --trace-gc". */
export function words(v: string | undefined): string[] {
  return (v ?? '').split(' ').filter((x) => x !== '');
}

/** --env "K=V K=V" as an environment. */
export function envOption(values: OptionValues, name: string): NodeJS.ProcessEnv {
  const list = words(text(values, name));
  const bad = list.find((kv) => kv.indexOf('=') <= 0);
  if (bad !== undefined) throw new UsageError(`--${name} takes K=V pairs separated by spaces, not ${bad}`);
  return Object.fromEntries(list.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
}
