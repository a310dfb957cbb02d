#!/usr/bin/env node
// Builds (tsc) only when a source is newer than the last build, for `prepare`
// and `npm run demo`. tsc's own incremental check still costs ~3 s with
// nothing to do, and npm runs `prepare` again the first time anyone runs
// `npx yurt-tunnel-server` in the checkout (it installs the checkout into
// its npx cache), so `npm ci && npx …` or `npm ci && npm run demo` paid for
// a second build. `npm run build` always runs tsc. The bundled CLIs
// (hack/bundle.mjs) are made after tsc, and again whenever they are older
// than tsc's last build.

import { spawnSync } from 'node:child_process';
import { readdirSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const STAMP = join(root, 'dist/.tsbuildinfo');
const SOURCES = ['cmd', 'pkg', 'test', 'hack', 'bench'];
const CONFIG = ['tsconfig.json', 'package.json', 'hack/bundle.mjs'];
const BUNDLE = join(root, 'dist/bin/meta.json');

function bundle() {
  return spawnSync(process.execPath, [join(root, 'hack/bundle.mjs')], { stdio: 'inherit' }).status ?? 1;
}

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return undefined; // absent
  }
}

/** The newest mtime of the .ts files under `dir` (0 if there is none). */
function newestTs(dir) {
  let newest = 0;
  if (mtime(dir) === undefined) return newest;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(join(entry.parentPath ?? entry.path, entry.name)).mtimeMs);
  }
  return newest;
}

const built = mtime(STAMP);
const newest = Math.max(...SOURCES.map((d) => newestTs(join(root, d))), ...CONFIG.map((f) => mtime(join(root, f)) ?? 0));
if (built !== undefined && built >= newest) {
  if ((mtime(BUNDLE) ?? -1) >= built) {
    process.stdout.write('dist/ is up to date with the sources; not rebuilding (npm run build always does)\n');
    process.exit(0);
  }
  process.exit(bundle());
}
const started = Date.now();
const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.json')], { stdio: 'inherit' });
// tsc leaves its build info alone when no file's content changed (a touched or checked-out file): stamp it with
// when the build started (a file saved during it is newer), or the newest source's time if that is later (clock
// skew would rebuild every time). A failed build must not count, though tsc may have written the file: date it back.
const when = tsc.status === 0 ? new Date(Math.max(started, newest)) : new Date(0);
if (mtime(STAMP) !== undefined) utimesSync(STAMP, when, when);
process.exit(tsc.status === 0 ? bundle() : (tsc.status ?? 1));
