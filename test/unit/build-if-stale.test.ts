// hack/build-if-stale.mjs (`prepare`, `npm run demo`) on a one-file project
// with the real tsc: it builds when there is no build or a source is newer
// than the last one (a touched file too, which tsc itself would not restamp),
// says so and does nothing when the build is current, and a failed build is
// tried again next time. After tsc it bundles (hack/bundle.mjs, here a
// stand-in that writes the bundle's meta.json and says so), and bundles alone
// when the build is current but the bundle is missing or older.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, rm, symlink, unlink, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { repoRoot } from '../support/upstream.js';

const UP_TO_DATE = /^dist\/ is up to date with the sources; not rebuilding/;
const BUNDLED = /^bundled$/m;
const STAND_IN_BUNDLER = `import { mkdirSync, writeFileSync } from 'node:fs';
mkdirSync(new URL('../dist/bin', import.meta.url), { recursive: true });
writeFileSync(new URL('../dist/bin/meta.json', import.meta.url), '{}');
console.log('bundled');
`;

test('builds only when a source is newer than the last build', { timeout: 60_000 }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'yt-build-if-stale-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  await mkdir(join(dir, 'hack'));
  await mkdir(join(dir, 'pkg'));
  await mkdir(join(dir, 'node_modules'));
  await copyFile(join(repoRoot(), 'hack/build-if-stale.mjs'), join(dir, 'hack/build-if-stale.mjs'));
  await writeFile(join(dir, 'hack/bundle.mjs'), STAND_IN_BUNDLER);
  await symlink(join(repoRoot(), 'node_modules/typescript'), join(dir, 'node_modules/typescript'));
  await writeFile(join(dir, 'package.json'), '{ "type": "module" }\n');
  const config = { compilerOptions: { outDir: 'dist', rootDir: '.', incremental: true, tsBuildInfoFile: 'dist/.tsbuildinfo', strict: true }, include: ['pkg'] };
  await writeFile(join(dir, 'tsconfig.json'), JSON.stringify(config));
  const source = join(dir, 'pkg/a.ts');
  await writeFile(source, 'export const a: number = 1;\n');
  const run = (): { status: number | null; stdout: string } => {
    const r = spawnSync(process.execPath, [join(dir, 'hack/build-if-stale.mjs')], { encoding: 'utf8', timeout: 30_000 });
    return { status: r.status, stdout: r.stdout };
  };

  let r = run();
  assert.equal(r.status, 0, r.stdout);
  assert.doesNotMatch(r.stdout, UP_TO_DATE, 'no build yet: it builds');
  assert.match(r.stdout, BUNDLED, 'and bundles after tsc');
  r = run();
  assert.equal(r.status, 0);
  assert.match(r.stdout, UP_TO_DATE);
  assert.doesNotMatch(r.stdout, BUNDLED);

  // The build is current but the bundle is gone: it bundles, and then both are current.
  await unlink(join(dir, 'dist/bin/meta.json'));
  r = run();
  assert.equal(r.status, 0);
  assert.match(r.stdout, BUNDLED);
  assert.match(run().stdout, UP_TO_DATE);

  // Touched, not changed (a checkout does this): newer than the build, so it builds, and counts that build.
  await sleep(20);
  await utimes(source, new Date(), new Date());
  assert.doesNotMatch(run().stdout, UP_TO_DATE);
  assert.match(run().stdout, UP_TO_DATE);

  // A type error: the build fails, and is not taken as current next time.
  await writeFile(source, 'export const a: number = "one";\n');
  assert.notEqual(run().status, 0);
  r = run();
  assert.notEqual(r.status, 0);
  assert.doesNotMatch(r.stdout, UP_TO_DATE);
});
