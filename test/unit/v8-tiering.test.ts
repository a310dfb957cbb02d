// The CLIs lower V8's interrupt budget first thing (cmd/common/v8-tiering.ts),
// so that a new process optimises its connection path within its first few
// hundred connections. Checked in a child process by what the budget does:
// how many calls a small function takes to be optimised (synchronously, with
// --no-concurrent-recompilation), with the module, without it, and with its
// budget on the command line instead; and that both CLIs load it before
// anything else.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { distUrl, runWithNatives } from '../support/v8-natives.js';

/** The repository root: this file runs as dist/test/unit/v8-tiering.test.js. */
const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..', '..', '..');
const MODULE = distUrl('dist/cmd/common/v8-tiering.js');

/**
 * Calls a small function until V8 has optimised it; returns the number of
 * calls and, when the module was loaded, the budget it says it sets.
 */
function callsUntilOptimised(loadModule: boolean, nodeArgs: string[] = []): { calls: number; budget?: number } {
  const script = `
    const budget = ${loadModule ? `(await import(${MODULE})).INTERRUPT_BUDGET` : 'undefined'};
    function f(a, b) { let s = 0; for (let i = 0; i < 4; i++) s += a * i + b; return s; }
    let n = 0;
    for (; n < 100000; n++) { f(n, 1); if ((%GetOptimizationStatus(f) & 16) !== 0) break; }
    console.log(JSON.stringify({ calls: n, budget }));`;
  return runWithNatives(script, ['--no-concurrent-recompilation', ...nodeArgs]);
}

test('loading v8-tiering sets its interrupt budget: V8 optimises a hot function as soon as with that budget on the command line, and a budget on the command line wins', () => {
  const without = callsUntilOptimised(false).calls;
  const withModule = callsUntilOptimised(true);
  const budget = withModule.budget!;
  const sameOnCommandLine = callsUntilOptimised(false, [`--interrupt-budget=${budget}`]).calls;
  const overridden = callsUntilOptimised(true, ['--interrupt-budget=67584']).calls;
  assert.ok(without < 100000, `V8 did not optimise the function at all (${without} calls)`);
  // A sixteenth of V8's default budget: 31 calls against 453 on Node 20.
  assert.ok(withModule.calls * 2 < without, `optimised after ${withModule.calls} calls with the module, ${without} without`);
  assert.ok(
    Math.abs(withModule.calls - sameOnCommandLine) * 4 <= sameOnCommandLine,
    `optimised after ${withModule.calls} calls with the module, ${sameOnCommandLine} with --interrupt-budget=${budget}`,
  );
  assert.ok(overridden * 2 > without, `a command-line budget was overridden: ${overridden} calls, ${without} with V8's default`);
});

test('both CLIs import v8-tiering before any other module', () => {
  for (const cli of ['yurt-tunnel-server', 'yurt-tunnel-agent']) {
    const text = readFileSync(join(ROOT, 'cmd', cli, 'main.ts'), 'utf8');
    const first = /^import\s[^;]*;/m.exec(text)?.[0];
    assert.equal(first, "import '../common/v8-tiering.js';", `${cli}: first import is ${first}`);
  }
});
