// Runs a script in a child Node process with V8's natives syntax
// (`%HasObjectElements`, `%GetOptimizationStatus`, ...), for tests that check
// what V8 makes of our objects and code. The script imports the compiled
// modules by URL (distUrl) and prints one JSON object, which is returned.

import { execFileSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** The repository root: this file runs as dist/test/support/v8-natives.js. */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** A module of the repository (a path under it, e.g. dist/pkg/...), as a quoted file URL to paste into a script. */
export function distUrl(path: string): string {
  return JSON.stringify(pathToFileURL(join(ROOT, path)).href);
}

/** Runs `script` (an ES module) with --allow-natives-syntax and `nodeArgs`; returns the JSON it printed. */
export function runWithNatives<T = Record<string, unknown>>(script: string, nodeArgs: readonly string[] = []): T {
  return JSON.parse(execFileSync(process.execPath, ['--allow-natives-syntax', ...nodeArgs, '--input-type=module', '-e', script], { encoding: 'utf8' })) as T;
}
