// PauseGate: one pause of a shared link, however many connections hold it.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { PauseGate } from '../../pkg/mux/pause-gate.js';

const LIMIT = { timeout: 10_000 };

test('PauseGate pauses on the first holder, resumes after the last, counting each holder once', LIMIT, () => {
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const a = {};
  const b = {};
  gate.hold(a);
  gate.hold(a);
  gate.hold(b);
  assert.equal(pauses, 1);
  assert.equal(gate.paused, true);
  gate.release(a);
  gate.release(a);
  assert.equal(resumes, 0, 'resumed while b still holds');
  assert.equal(gate.paused, true);
  gate.release(b);
  assert.equal(resumes, 1);
  assert.equal(gate.paused, false);
  gate.release(b);
  gate.release({});
  assert.equal(resumes, 1);
  gate.hold(b);
  assert.equal(pauses, 2);
});

test('PauseGate clear() forgets the holders without resuming', LIMIT, () => {
  let pauses = 0;
  let resumes = 0;
  const gate = new PauseGate(
    () => pauses++,
    () => resumes++,
  );
  const a = {};
  gate.hold(a);
  gate.clear();
  assert.equal(gate.paused, false);
  gate.release(a);
  assert.equal(resumes, 0);
  gate.hold(a);
  assert.equal(pauses, 2);
});
