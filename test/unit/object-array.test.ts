// Arrays that a connection or a link makes fresh (pkg/mux/object-array.ts)
// are arrays of objects from birth, so that the first packet on a new one
// changes no elements kind and throws away no code V8 optimised on older
// ones. Checked in a child process with V8's own predicates, on the helpers
// and on what a fresh ResendBuffer holds.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { distUrl as url, runWithNatives } from '../support/v8-natives.js';

/** Runs `body` with V8's natives and returns what it printed, as JSON. */
function natives(body: string): Record<string, boolean> {
  const script = `
    const { objectArray, objectSlots } = await import(${url('dist/pkg/mux/object-array.js')});
    const { ResendBuffer } = await import(${url('dist/pkg/mux/resend-buffer.js')});
    const kind = (a) => ({ objects: %HasObjectElements(a), holey: %HasHoleyElements(a) });
    ${body}`;
  return runWithNatives<Record<string, boolean>>(script);
}

test('objectArray and objectSlots make arrays of the object kind, empty or not; [] would not be', () => {
  const out = natives(`
    const fresh = objectArray();
    const slots0 = objectSlots(0);
    const slots8 = objectSlots(8);
    console.log(JSON.stringify({
      literal: %HasObjectElements([]),
      objectArray: %HasObjectElements(fresh) && !%HasHoleyElements(fresh) && fresh.length === 0,
      slots0: %HasObjectElements(slots0) && %HasHoleyElements(slots0) && slots0.length === 0,
      slots8: %HasObjectElements(slots8) && %HasHoleyElements(slots8) && slots8.length === 8 && slots8.every((x) => x === undefined),
    }));`);
  assert.deepEqual(out, { literal: false, objectArray: true, slots0: true, slots8: true });
});

test('a fresh ResendBuffer, and one grown and emptied, hold their ring in arrays of one kind (holey objects)', () => {
  const out = natives(`
    const b = new ResendBuffer();
    const fresh = [b.ids, b.items].map(kind);
    b.appendControl({ type: 'CLOSE_REQ', connectID: 1n });
    const grown = [b.ids, b.items].map(kind);
    b.clear();
    const cleared = [b.ids, b.items].map(kind);
    console.log(JSON.stringify({ same: JSON.stringify(fresh) === JSON.stringify(grown) && JSON.stringify(grown) === JSON.stringify(cleared), fresh: JSON.stringify(fresh) }));`);
  assert.deepEqual(out, {
    same: true,
    fresh: JSON.stringify([
      { objects: true, holey: true },
      { objects: true, holey: true },
    ]),
  });
});
