#!/usr/bin/env node
// Runs every compiled test file (dist/test/**/*.test.js) with Node's test
// runner. `npm test` builds first. Extra arguments go to `node --test`
// (e.g. --test-name-pattern=...).

import { spawnSync } from 'node:child_process';
import { readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const testDir = join(root, 'dist', 'test');

function find(dir) {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return find(p);
    return name.endsWith('.test.js') ? [p] : [];
  });
}

const files = find(testDir).sort();
if (files.length === 0) {
  console.error(`no test files under ${relative(root, testDir)}; run \`npm run build\` first`);
  process.exit(1);
}
const args = ['--test', '--test-timeout=180000', ...process.argv.slice(2), ...files];
const started = Date.now();
const r = spawnSync(process.execPath, args, { stdio: 'inherit', cwd: root });
console.error(`\n${files.length} test files in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(r.status ?? 1);
