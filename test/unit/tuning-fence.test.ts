// The tuning that stays, and why: each piece below paid for itself by a clear
// margin on a user-visible figure when re-measured (npm run bench, alternated
// with Konnectivity; the figure is in the file's own comment), or is opt-in.
// Code under pkg/ and cmd/ that reaches for V8 or Node internals (V8 flags,
// the inspector, private fields, private files of a package) may sit only in
// the files named here, so that new tuning has to be measured and named here
// before it lands. Comments are not read.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

/** The repository root: this file runs as dist/test/unit/tuning-fence.test.js. */
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

/** What marks code as reaching below the public API or tuning V8. */
const MARKERS: ReadonlyArray<[string, RegExp]> = [
  ['a V8 flag set at run time', /setFlagsFromString/],
  ['a V8 option', /--(max-semi-space-size|v8-pool-size|interrupt[-_]budget)/],
  ['the inspector', /node:inspector/],
  ['a private field of a Node object', /\b_(handle|parent|peername)\b|\bonconnection\b/],
  ['a private file of a package', /['"](prom-client|winston|commander|node-forge)\/lib\//],
  ['an array made for its V8 elements kind', /\bobject(Array|Slots)\b/],
];

/** The files allowed to hold a marker, and why each stays. */
const KEPT: Readonly<Record<string, string>> = {
  'cmd/common/v8-tiering.ts': 'V8 optimises sooner only while the opt-in start-up rehearsal (--startup-rehearsal) runs',
  'pkg/server/node-options.ts': "the server's young generation capped at 2 × 4 MB: RSS at ready 79 -> 71 MB, bulk and CPU unchanged",
  'pkg/agent/node-options.ts': "the agent's young generation at 2 × 1 MB and one V8 worker: 2-3 MB less RSS idle and with 1,000 connections",
  'pkg/meta/garbage-after-flood.ts': "one full collection after a flood: the server's RSS 20 s after 1,800 callers left 125-131 MB, not 140-145",
  'pkg/meta/profiling.ts': 'not tuning: --enable-profiling serves CPU and heap profiles through the inspector',
};

/** Tuning kept without a marker: the fence names it so that it is not removed unmeasured. */
const KEPT_UNMARKED: Readonly<Record<string, string>> = {
  'pkg/mux/buffer-pool.ts': 'slab reuse: without it bulk CPU per GiB rose 2.7 -> 3.8 s (server) and 2.2 -> 3.4 s (agent)',
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith('.ts') ? [path] : [];
  });
}

/** The code without its comments (good enough for the markers above: none of them holds `//`). */
function code(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"])\/\/.*$/gm, '$1');
}

test('code that tunes V8 or reaches below public APIs sits only in the files the fence names', () => {
  const found = new Map<string, string[]>();
  for (const file of [...sourceFiles(join(ROOT, 'pkg')), ...sourceFiles(join(ROOT, 'cmd'))]) {
    const text = code(readFileSync(file, 'utf8'));
    const what = MARKERS.filter(([, re]) => re.test(text)).map(([name]) => name);
    if (what.length > 0) found.set(relative(ROOT, file), what);
  }
  const outside = [...found].filter(([file]) => KEPT[file] === undefined);
  assert.deepEqual(outside, [], 'measure it, then name it in KEPT with its figure (or take it out)');
  // The lists stay true: every file named still holds what it was named for.
  for (const file of Object.keys(KEPT)) assert.ok(found.has(file), `${file} is named by the fence but holds no marker any more`);
});

test('each piece of tuning kept without a marker is still there, and says so where it lives', () => {
  for (const [file, why] of Object.entries(KEPT_UNMARKED)) {
    const text = readFileSync(join(ROOT, file), 'utf8');
    assert.match(text, /test\/unit\/tuning-fence\.test\.ts/, `${file} (${why}) names the fence in its comment`);
  }
});
