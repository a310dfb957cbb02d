// The start-up rehearsal lowers V8's interrupt budget while it runs, and puts
// V8's default back after (cmd/common/v8-tiering.ts). Checked in a child
// process by what the budget does: how many calls a small function takes to
// be optimised (synchronously, with --no-concurrent-recompilation).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { distUrl, runWithNatives } from '../support/v8-natives.js';

const MODULE = distUrl('dist/cmd/common/v8-tiering.js');

/** Calls a small function until V8 has optimised it; returns the number of calls. */
function callsUntilOptimised(): number {
  const script = `
    function f(a, b) { let s = 0; for (let i = 0; i < 4; i++) s += a * i + b; return s; }
    let n = 0;
    for (; n < 100000; n++) { f(n, 1); if ((%GetOptimizationStatus(f) & 16) !== 0) break; }
    console.log(n);`;
  return runWithNatives<number>(script, ['--no-concurrent-recompilation']);
}

test('rehearsalTiering: V8 optimises sooner between begin() and end(), at its default after; nothing with a budget on the command line', () => {
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
  const byDefault = callsUntilOptimised();
  assert.ok(out.during * 2 < out.after, `optimised after ${out.during} calls during the rehearsal, ${out.after} after it`);
  assert.ok(Math.abs(out.after - byDefault) * 4 < byDefault, `after end(): ${out.after} calls, V8's default takes ${byDefault}`);
  assert.equal(out.overridden, true, 'a budget on the command line is left alone');
});
