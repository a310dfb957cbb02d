// A script fragment for tests run in a child process with --expose-gc
// (runWithNatives): `await oldBytesPer(make)` measures what each of many things
// made leaves in V8's old generation once two scavenges have passed;
// `oldBytesPerSync(make)` the same for things made and dropped synchronously
// (no timers or promises between them, whose own garbage blurs small figures).
// Batches of 1,000: what V8 itself leaves now and then (a compile job
// finishing, 2-4 KB) read as 10-20 B per item in batches of 200 on a loaded
// machine, over the 16 B bound; amortised over 1,000 it stays under 5.

import assert from 'node:assert/strict';
import { runWithNatives } from './v8-natives.js';

/**
 * Old-generation bytes per thing made that outlive two scavenges (the median of five batches, after a warm-up:
 * a batch that compiles code or meets a scavenge half-way reads high); `make(done)` makes one and calls done when it is gone.
 */
export const MEASURE = `
  const { getHeapSpaceStatistics } = await import('node:v8');
  const old = () => getHeapSpaceStatistics().find((s) => s.space_name === 'old_space').space_used_size;
  const batch = (make, n) => new Promise((resolve) => {
    let left = n;
    const next = () => (left-- === 0 ? setTimeout(resolve, 20) : make(next));
    next();
  });
  async function oldBytesPer(make, n = 200) {
    await batch(make, 500);
    const rounds = [];
    for (let i = 0; i < 5; i++) {
      gc(); gc();
      const before = old();
      await batch(make, n);
      gc({ type: 'minor' }); gc({ type: 'minor' });
      rounds.push(Math.round((old() - before) / n));
    }
    return rounds.sort((a, b) => a - b)[2];
  }
  function oldBytesPerSync(make, n = 1000) {
    for (let i = 0; i < 500; i++) make();
    const rounds = [];
    for (let r = 0; r < 5; r++) {
      gc(); gc();
      const before = old();
      for (let i = 0; i < n; i++) make();
      gc({ type: 'minor' }); gc({ type: 'minor' });
      rounds.push(Math.round((old() - before) / n));
    }
    return rounds.sort((a, b) => a - b)[2];
  }`;

/**
 * Runs `script` (after MEASURE, with --expose-gc; it prints `{ ours, control }` in bytes per item) and checks that
 * our table leaves next to nothing in the old generation per item that comes and goes, while the built-in control
 * (a Map or Set) visibly does: the measurement can see what it guards.
 */
export function assertTableStaysPut(script: string, names: { ours: string; control: string; item: string }): void {
  const out = runWithNatives<{ ours: number; control: number }>(`${MEASURE}\n${script}`, ['--expose-gc']);
  assert.ok(out.ours < 16, `${names.ours}: ${out.ours} B per ${names.item} left in the old generation`);
  assert.ok(out.control > out.ours + 30, `${names.control}: ${out.control} B per ${names.item}, ${names.ours}: ${out.ours}`);
}
