// The CLIs lower V8's interrupt budget first thing (cmd/common/v8-tiering.ts),
// so that a new process reaches its steady cost per connection within about
// a thousand connections. Checked in a child process by what the budget does:
// how many calls a small function takes to be optimised (synchronously, with
// --no-concurrent-recompilation), with the module and without it; and that
// both CLIs load it before anything else.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { test } from 'node:test';
import { distUrl, runWithNatives } from '../support/v8-natives.js';

/** The repository root: this file runs as dist/test/unit/v8-tiering.test.js. */
const ROOT = resolve(dirname(new URL(import.meta.url).pathname), '..', '..', '..');
const MODULE = distUrl('dist/cmd/common/v8-tiering.js');

/** Calls a small function until V8 has optimised it; returns the number of calls. */
function callsUntilOptimised(loadModule: boolean, nodeArgs: string[] = []): number {
  const script = `
    ${loadModule ? `await import(${MODULE});` : ''}
    function f(a, b) { let s = 0; for (let i = 0; i < 4; i++) s += a * i + b; return s; }
    let n = 0;
    for (; n < 100000; n++) { f(n, 1); if ((%GetOptimizationStatus(f) & 16) !== 0) break; }
    console.log(n);`;
  return runWithNatives<number>(script, ['--no-concurrent-recompilation', ...nodeArgs]);
}

test('loading v8-tiering makes V8 optimise a hot function after fewer calls; a budget on the command line wins', () => {
  const without = callsUntilOptimised(false);
  const withModule = callsUntilOptimised(true);
  const overridden = callsUntilOptimised(true, ['--interrupt-budget=67584']);
  assert.ok(without < 100000, `V8 did not optimise the function at all (${without} calls)`);
  // A quarter of the budget: about a quarter of the calls (115 against 453 on Node 20).
  assert.ok(withModule * 2 < without, `optimised after ${withModule} calls with the module, ${without} without`);
  assert.ok(overridden * 2 > without, `a command-line budget was overridden: ${overridden} calls, ${without} with V8's default`);
});

test('rehearsalTiering: V8 optimises sooner between begin() and end(), at the process budget after; nothing with a budget on the command line', () => {
  const script = `
    const { rehearsalTiering } = await import(${MODULE});
    const calls = (f) => { let n = 0; for (; n < 100000; n++) { f(n, 1); if ((%GetOptimizationStatus(f) & 16) !== 0) break; } return n; };
    const t = rehearsalTiering();
    t.begin();
    const during = calls(function f(a, b) { let s = 0; for (let i = 0; i < 4; i++) s += a * i + b; return s; });
    t.end();
    const after = calls(function g(a, b) { let s = 0; for (let i = 0; i < 4; i++) s += a * i + b; return s; });
    console.log(JSON.stringify({ during, after, overridden: rehearsalTiering(['--interrupt-budget=67584']) === undefined }));`;
  const out = runWithNatives<{ during: number; after: number; overridden: boolean }>(script, ['--no-concurrent-recompilation']);
  const withModule = callsUntilOptimised(true);
  assert.ok(out.during * 2 < out.after, `optimised after ${out.during} calls during the rehearsal, ${out.after} after it`);
  assert.ok(Math.abs(out.after - withModule) * 4 < withModule, `after end(): ${out.after} calls, the process budget takes ${withModule}`);
  assert.equal(out.overridden, true, 'a budget on the command line is left alone');
});

test('both CLIs import v8-tiering before any other module', () => {
  for (const cli of ['yurt-tunnel-server', 'yurt-tunnel-agent']) {
    const text = readFileSync(join(ROOT, 'cmd', cli, 'main.ts'), 'utf8');
    const first = /^import\s[^;]*;/m.exec(text)?.[0];
    assert.equal(first, "import '../common/v8-tiering.js';", `${cli}: first import is ${first}`);
  }
});
