// A checkout whose path has a space (a home folder such as "My Projects"):
// the scripts and the CLI finder must turn their own file URLs into paths with
// fileURLToPath, not URL.pathname, which keeps the space as %20. Before that,
// `npm run demo` and `npm test` failed there with ENOENT on a path with %20.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, sep } from 'node:path';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { repoRoot } from '../support/upstream.js';

async function checkoutWithSpaces(t: { after(fn: () => Promise<void>): void }): Promise<string> {
  const parent = await mkdtemp(join(tmpdir(), 'yt-paths-'));
  t.after(() => rm(parent, { recursive: true, force: true }));
  const dir = join(parent, 'my projects', 'yurt tunnel');
  await mkdir(join(dir, 'hack'), { recursive: true });
  await writeFile(join(dir, 'package.json'), '{ "type": "module" }\n');
  return dir;
}

test('the bundled CLIs are found in a checkout whose path has spaces', async (t) => {
  const dir = await checkoutWithSpaces(t);
  await mkdir(join(dir, 'dist/hack'), { recursive: true });
  await mkdir(join(dir, 'dist/bin'), { recursive: true });
  await copyFile(join(repoRoot(), 'dist/hack/cli-bins.js'), join(dir, 'dist/hack/cli-bins.js'));
  // Written after the module it names, so the bundles count as current.
  await writeFile(join(dir, 'dist/bin/meta.json'), JSON.stringify({ inputs: { 'dist/hack/cli-bins.js': {} }, outputs: {} }));
  const bins = (await import(pathToFileURL(join(dir, 'dist/hack/cli-bins.js')).href)) as { REPO_ROOT: string; SERVER_BIN: string };
  assert.equal(bins.REPO_ROOT, dir + sep);
  assert.equal(bins.SERVER_BIN, join(dir, 'dist/bin/yurt-tunnel-server/main.js'));
});

test('the test runner runs the tests of a checkout whose path has spaces', { timeout: 60_000 }, async (t) => {
  const dir = await checkoutWithSpaces(t);
  for (const f of ['run-tests.mjs', 'test-outcomes.mjs']) await copyFile(join(repoRoot(), 'hack', f), join(dir, 'hack', f));
  await mkdir(join(dir, 'dist/test'), { recursive: true });
  await writeFile(join(dir, 'dist/test/one.test.js'), "import { test } from 'node:test';\ntest('passes', () => {});\n");
  // Without NODE_TEST_CONTEXT, which this runner sets: with it, a nested `node --test` runs no file.
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const r = spawnSync(process.execPath, [join(dir, 'hack/run-tests.mjs')], { encoding: 'utf8', timeout: 50_000, env });
  assert.equal(r.status, 0, `run-tests.mjs: ${r.stderr}`);
  assert.match(r.stderr, /^1 test files in /m);
  assert.match(r.stdout, /^# pass 1$/m);
});

test('no source turns a file URL into a path with URL.pathname', async () => {
  const root = repoRoot();
  const offenders: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(join(root, dir), { withFileTypes: true })) {
      const rel = join(dir, entry.name);
      if (entry.isDirectory()) await walk(rel);
      else if (/\.(ts|mjs)$/.test(entry.name) && /import\.meta\.url\)?\.pathname/.test(await readFile(join(root, rel), 'utf8'))) offenders.push(rel);
    }
  };
  for (const dir of ['bench', 'cmd', 'hack', 'pkg', 'test']) await walk(dir);
  assert.deepEqual(offenders, [], 'use fileURLToPath(import.meta.url): .pathname keeps a space as %20');
});
